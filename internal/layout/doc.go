// Package layout holds the test of the rules the module's packages keep towards each other: who may import
// whom (stages never each other, package kafka no record type, topics the standard library only, no stage and
// not the command a benchmark). It has no code: the rules are checked against `go list`'s view of the real
// import graph.
package layout
