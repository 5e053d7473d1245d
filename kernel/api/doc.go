// Package api is the wire format of the potato-k3 resident service: the endpoint paths, the JSON bodies
// that the notebook client (package kernel) sends and the service (package kernel/server) answers, and the
// state file through which notebook cells find a background engine. It imports only the standard library,
// so that the client GoNB recompiles into every cell stays small, and so that any other client (Python,
// curl) has one place that says what goes over the wire.
//
// A request names its inputs in order (the order is the seq_id of the results) and what to capture:
//
//	req := api.Request{
//		Inputs: []api.Input{
//			api.TextInput("The quick brown fox"),
//			{Tokens: []int32{1, 2, 3}},
//			{Conversation: json.RawMessage(`{"messages": [{"role": "user", "content": "Hi"}], "thinking": false}`)},
//		},
//		Options: api.Options{TopK: 5, Lens: []int{0, 3}},
//	}
//
// POSTed to PathJobs it answers 202 with a JobStatus; Progress lines stream from ProgressPath until the
// job's state is terminal, and each captured table comes back from TablePath as an Arrow IPC stream
// (ContentTypeArrow). Every error is an Error body: {"error": "...", "limit": "--max-tokens"}.
package api
