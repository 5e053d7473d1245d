// Package datasets reads conversations for replay from JSONL and Parquet files in the common chat shape,
// bundles a few example conversations, and caches replay results on disk as Parquet.
//
// # Reading conversations
//
// A JSONL file has one conversation a line, either an object or a bare array of messages:
//
//	{"id": "q1", "thinking": false, "messages": [{"role": "user", "content": "Hi"}, ...]}
//	[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
//
// A message has a role (system, user, assistant, tool), content (a string, null, or a list of
// {"type": "text", "text": ...} parts, which are joined), reasoning_content (also read as "reasoning" or
// "thinking"), name, tool_calls ({id, type: "function", function: {name, arguments}}, arguments as a JSON
// string, kept verbatim, or an object, written as compact JSON) and tool_call_id. An unknown key (at
// the top, in a message, a tool call, its function or a content part) is an error naming it, so that a
// misspelled "contnet" is not read as an empty turn; "metadata" at the top is the one key ignored. A
// conversation's JSON text must be valid UTF-8 (a bad byte would be read as U+FFFD and scored). A
// conversation without an "id" gets its line (JSONL), item (JSON) or row (Parquet) number. Anything
// else that does not fit is an *Error naming the file, the line and the field:
//
//	datasets: chats.jsonl line 3: messages[2].role: unknown role "bot" (want system, user, assistant or tool)
//
// A line without "thinking" leaves the conversation's Thinking unset, and the engine refuses to guess:
// choose for the whole dataset with SetThinking.
//
//	convs, err := datasets.Load("chats.jsonl") // or .json, .parquet
//	if err != nil { ... }
//	datasets.SetThinking(convs, tokenizer.ThinkingOff)
//
// A .json file that holds one JSON array of such conversations is read with ReadJSON (errors then count
// items). A Parquet file has a column "messages" (list<struct<role, content, ...>>, as Hugging Face datasets
// store chats) or a column "conversation" of JSON text, and optional columns id, thinking and
// thinking_effort (ReadParquet).
//
// Examples returns fifteen short conversations written for this project, covering every channel (system,
// user, reasoning, response, tool call, tool result), with code and Chinese-English mixed text.
//
// # Caching results
//
// A Cache stores the Arrow tables of one replay under a Key derived from the model, the engine version and
// the request, so a notebook re-run does not replay again:
//
//	cache, _ := datasets.OpenCache(dir)
//	key, _ := datasets.NewKey(modelConfigHash, engineVersion, request)
//	if tables, ok, err := cache.Get(key); err == nil && ok {
//		defer tables.Release()
//		... use tables["tokens"] ...
//	}
//	... replay, then cache.Put(key, datasets.Tables{"tokens": recs})
//
// Entries are written whole or not at all; an entry that cannot be read back is reported to
// Cache.OnCorrupt, removed, and counted as a miss.
package datasets
