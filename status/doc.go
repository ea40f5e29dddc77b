// Package status is the operator's view of a running pipeline, in two halves that meet on the status topic.
//
//   - Publish (publish.go) runs in every stage's process: every few seconds it takes the process's own figures
//     from its Prometheus registry (records, rejections and tokens done so far, and, for generate, every
//     SGLang endpoint's in-flight requests, budget, KV usage, output tokens and retractions; figures.go names
//     the series) and writes them as a topics.Status keyed by stage and instance.
//   - Collector (report.go) is what `draftflow status` runs: for every stage's consumer group it reads from
//     Kafka itself the committed and end offsets (lag), the members (DescribeGroup) and the rejected topic
//     (rejections by stage and reason class), joins the latest Status of every instance, and computes rates
//     over a sliding window of its reads and the status records, an ETA (lag / rate) and warnings. Render
//     (render.go) prints a Report as text; a Report marshals to the documented JSON.
//
// Reading the registry rather than asking each stage for its figures keeps the stages unaware of this package:
// what the status shows is exactly what Prometheus scrapes, and a test checks that every series named here
// is one a stage exports.
package status
