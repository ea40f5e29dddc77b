// Package offline holds the tools that work on the shards once they are written, apart from the pipeline:
// Inspect checks an output directory against its manifests, the schema, the token counts and the feature
// files; MergeTurns writes each multi-turn conversation as one row where its turns merge token-exactly;
// Export writes the rows as the JSON lines that SpecForge and speculators read, under the length rules of
// Limits; Vocab selects a draft vocabulary from the generated-token counts and writes its d2t and t2d maps.
// The `draftflow` subcommands inspect, merge-turns, export and vocab call them.
//
// They read and write the format of package shard and nothing else of the pipeline (Inspect also counts the
// records the sink's journal holds past its shards, through package sink/journal); none needs a broker. Each
// takes a context and stops, with its error, once the context ends.
package offline
