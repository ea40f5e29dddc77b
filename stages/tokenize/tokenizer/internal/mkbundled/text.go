package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Training text: a little hand-written English, code and CJK, expanded with deterministic
// synthesized sentences so that a few thousand merges have support.

const prose = `The pipeline reads conversations, renders each one with the model's chat template, and turns the
result into token ids. A drafter model learns to predict the next tokens of a larger target model, so the
ids it sees during training must be exactly the ids the target sees when it serves requests. When the
tokenizer splits a word differently, the drafter learns the wrong thing, and nobody notices until the
acceptance rate drops. That is why every stage is tested against the reference implementation.
Streams of prompts flow through topics: the ingest stage reads files, the tokenize stage applies the
template, the generate stage asks the server for completions, and the sink writes compressed shards.
Each message carries an identifier, so retries never duplicate work and the output stays deterministic.
Questions often ask how to reverse a list, how to parse a date, or why a test fails on one machine only.
The assistant thinks step by step, calls a tool when it needs fresh data, and answers in plain words.
Weather in Paris is mild today; the temperature is 21 degrees, with light wind from the west.
It's simple: don't guess, measure. We'll compare throughput in megabytes per second and tokens per second.
`

const code = `package main

import (
	"fmt"
	"strings"
)

// Reverse returns s with its runes in reverse order.
func Reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func main() {
	for _, word := range strings.Fields("hello world from the tokenizer") {
		fmt.Println(Reverse(word))
	}
}

def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

class Config:
    def __init__(self, path: str, retries: int = 3) -> None:
        self.path = path
        self.retries = retries

    def load(self) -> dict:
        with open(self.path, encoding="utf-8") as f:
            return json.load(f)

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
SELECT id, name, created_at FROM users WHERE status = 'active' ORDER BY created_at DESC LIMIT 10;
`

const cjk = `机器学习是人工智能的一个分支。我们使用大量的数据来训练模型，让模型学会预测下一个词。
分词器把文本切分成词元，每个词元对应一个编号。训练数据必须和推理时完全一致。
今天天气很好，我们去公园散步吧。这个问题很有意思，让我想一想。
日本語の文章も少し含めます。東京は日本の首都です。ありがとうございます。
한국어 문장도 조금 포함합니다. 감사합니다.
`

var (
	subjects = []string{"The model", "A user", "The server", "Our team", "The tokenizer", "This function",
		"The test", "Every request", "The drafter", "The cluster", "A reviewer", "The scheduler"}
	verbs = []string{"reads", "writes", "returns", "computes", "checks", "encodes", "decodes", "sends",
		"receives", "updates", "measures", "compares", "loads", "stores", "splits", "merges"}
	objects = []string{"the input text", "a list of numbers", "the configuration file", "token ids",
		"the chat template", "a JSON object", "the training data", "every message", "the results",
		"a new version", "the error message", "the benchmark figures", "the output shards"}
	tails = []string{"before the deadline.", "in under a second.", "without any retries.",
		"for each conversation.", "and logs the outcome.", "when the cache is warm.",
		"as the reference does.", "on every machine.", "with exact ids.", "at startup."}
	zhWords = []string{"模型", "数据", "训练", "推理", "文本", "编号", "测试", "结果", "服务器", "用户",
		"问题", "答案", "工具", "调用", "思考", "速度", "准确", "每秒"}
)

// trainingText returns the full deterministic training text.
func trainingText() string {
	var b strings.Builder
	b.WriteString(prose)
	b.WriteString(code)
	b.WriteString(cjk)
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	for i := 0; i < 2500; i++ {
		fmt.Fprintf(&b, "%s %s %s %s ", pick(subjects), pick(verbs), pick(objects), pick(tails))
		if i%7 == 0 {
			fmt.Fprintf(&b, "It took %d ms and used %d.%d GB. ", r.IntN(5000), r.IntN(64), r.IntN(10))
		}
		if i%5 == 0 {
			for k := 0; k < 4; k++ {
				b.WriteString(pick(zhWords))
			}
			b.WriteString("。")
		}
		if i%9 == 0 {
			fmt.Fprintf(&b, "\n\tx%d := compute(%q, %d)\n\tif err != nil {\n\t\treturn err\n\t}\n", i, pick(verbs), r.IntN(100))
		}
		if i%11 == 0 {
			b.WriteString("\n\n")
		}
		for k := 4 + r.IntN(10); k > 0; k-- {
			w := pick(commonWords)
			switch r.IntN(12) {
			case 0:
				w = strings.ToUpper(w[:1]) + w[1:]
			case 1:
				w += ","
			case 2:
				w += "'s"
			}
			b.WriteString(w)
			b.WriteByte(' ')
		}
		b.WriteString(". ")
	}
	return b.String()
}
