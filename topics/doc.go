// Package topics is the contract between draftflow's stages: the topic names, the record types that flow on
// them, and their versioned binary encoding. It imports only the standard library, so a package that needs
// one record type (a chat template engine needs topics.Message) pulls in nothing else.
//
// Stages never import each other; they share only this package, and reach Kafka through package kafka
// (consumer, producer, admin), which writes and reads these records.
package topics
