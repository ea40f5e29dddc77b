package main

// Word lists the generator draws from. Changing any of them changes the sample: regenerate it.

var vocab = []string{
	"the", "system", "data", "model", "token", "stream", "partition", "offset", "replica", "budget",
	"cache", "latency", "throughput", "request", "response", "queue", "worker", "batch", "shard", "manifest",
	"river", "mountain", "forest", "harbor", "village", "market", "bridge", "lantern", "garden", "orchard",
	"quickly", "carefully", "rarely", "often", "slowly", "together", "again", "almost", "perhaps", "quietly",
	"build", "measure", "compare", "explain", "describe", "improve", "reduce", "collect", "observe", "design",
	"bright", "narrow", "ancient", "modern", "careful", "simple", "complex", "stable", "fragile", "hidden",
	"and", "but", "because", "while", "although", "when", "where", "after", "before", "since",
	"engineer", "student", "farmer", "painter", "doctor", "teacher", "sailor", "baker", "pilot", "writer",
	"of", "in", "on", "with", "for", "from", "under", "over", "between", "through",
	"energy", "climate", "history", "language", "music", "economy", "health", "physics", "biology", "poetry",
}

var templates = []string{
	"Explain how %s works in %s.",
	"What are the main trade-offs of %s for %s?",
	"Write a short essay about %s in %s.",
	"Give me three practical tips on %s for %s.",
	"Compare two approaches to %s in %s and recommend one.",
	"How would you teach %s to someone new to %s?",
	"What common mistakes do people make with %s in %s?",
	"Summarise the history of %s in %s.",
}

var subjects = []string{
	"garbage collection", "consensus protocols", "photosynthesis", "compound interest", "speculative decoding",
	"sourdough fermentation", "plate tectonics", "vector databases", "jazz improvisation", "supply chains",
	"public key cryptography", "bird migration", "rate limiting", "the water cycle", "index funds",
	"container orchestration", "sleep hygiene", "tide prediction", "load balancing", "memory allocation",
}

var contexts = []string{
	"a small startup", "high school physics", "distributed systems", "everyday life", "a rainy city",
	"a hospital", "a research lab", "an open-source project", "a mountain village", "a large bank",
}

var styles = []string{"one paragraph", "plain English", "a numbered list", "under fifty words", "a friendly tone"}

var systemPrompts = []string{
	"You are a helpful assistant.",
	"You are a patient teacher who explains things step by step.",
	"You are a senior software engineer. Be precise and concise.",
	"You answer like a friendly librarian, citing sources when you can.",
	"Always answer in the language the user writes in.",
}

var followUps = []string{"Thanks. Next:", "Interesting! Also,", "Could you go deeper?", "One more thing:", "OK."}

var cities = []string{"Paris", "Tokyo", "Nairobi", "Lima", "Oslo", "Hanoi", "Toronto", "Cairo", "Zürich", "São Paulo"}

var conditions = []string{"sunny", "cloudy", "rainy", "windy", "snowing", "foggy"}

var cjkQuestions = []string{
	"请用三句话解释什么是机器学习。",
	"東京でおすすめの観光地を教えてください。",
	"한국어로 간단한 자기소개를 써 주세요.",
	"为什么天空是蓝色的？请简单回答。",
	"日本の四季について短い詩を書いてください。",
	"如何用 Go 语言读取一个大文件？",
	"서울에서 부산까지 가장 빠른 방법은 무엇인가요?",
	"请把这句话翻译成英文：今天天气很好。",
}

var emoji = []string{"🚀", "🌧️", "🍣", "🐍", "🎉", "👩‍💻", "🇯🇵", "❤️", "🤔", "🌏"}

var codeAsks = []string{
	"Find the bug in this code and fix it.",
	"Explain what this code does, line by line.",
	"Rewrite this code to be more idiomatic.",
	"Add tests for this function.",
	"Make this code handle errors properly.",
}

var codeSnippets = []struct{ lang, code string }{
	{"python", "def mean(xs):\n    return sum(xs) / len(xs)\n\nprint(mean([]))"},
	{"go", "func readAll(path string) string {\n\tb, _ := os.ReadFile(path)\n\treturn string(b)\n}"},
	{"sql", "SELECT name, COUNT(*) FROM orders\nJOIN users ON users.id = orders.user_id\nGROUP BY name\nHAVING COUNT(*) > 10;"},
	{"javascript", "const sleep = ms => new Promise(r => setTimeout(r, ms));\nasync function retry(fn, n) {\n  for (let i = 0; i < n; i++) {\n    try { return await fn(); } catch (e) { await sleep(2 ** i * 100); }\n  }\n}"},
	{"rust", "fn largest<T: PartialOrd>(list: &[T]) -> &T {\n    let mut largest = &list[0];\n    for item in list {\n        if item > largest { largest = item; }\n    }\n    largest\n}"},
	{"bash", "for f in *.jsonl; do\n  wc -l \"$f\" | awk '{print $1}' >> counts.txt\ndone"},
}
