package tokenizer

// Role is who speaks a message: "system", "user", "assistant" or "tool".
type Role string

// The roles the K3 chat format knows.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Thinking says whether an assistant turn is rendered in thinking mode (with a think channel). It has no
// default on purpose: the model's output depends on it, so the caller must always say which.
type Thinking int

const (
	// ThinkingUnset is the zero value; encoding a conversation with it is an error.
	ThinkingUnset Thinking = iota
	// ThinkingOn renders <|open|>think<|sep|>...<|close|>think<|sep|> (possibly empty) before each response.
	ThinkingOn
	// ThinkingOff renders assistant turns with a response channel only.
	ThinkingOff
)

// ToolCall is one function call made by an assistant message, in the common chat shape.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text, rendered verbatim
}

// Message is one turn of a conversation in the common chat shape (OpenAI-style field names).
type Message struct {
	Role      Role       `json:"role"`
	Content   string     `json:"content"`
	Reasoning string     `json:"reasoning_content,omitempty"` // the think channel of an assistant turn
	Name      string     `json:"name,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// Conversation is a list of messages plus how to render it.
type Conversation struct {
	ID       string    `json:"id,omitempty"`
	Messages []Message `json:"messages"`
	Thinking Thinking  `json:"-"`
	// Effort, when set, adds the internal system message type="thinking-effort" (low, medium, high, max).
	Effort string `json:"thinking_effort,omitempty"`
	// GenerationPrompt appends the assistant opening (and think or response opening) after the last message,
	// as the model saw it right before it began to answer.
	GenerationPrompt bool `json:"add_generation_prompt,omitempty"`
}

// Channel says what part of a rendered conversation a token belongs to.
type Channel string

// The channels a token can be attributed to.
const (
	ChannelStructure Channel = "structure" // special tokens, tag names and attributes of the XTML markup
	ChannelSystem    Channel = "system"
	ChannelUser      Channel = "user"
	ChannelThink     Channel = "think"
	ChannelResponse  Channel = "response"
	ChannelToolCall  Channel = "tool_call"
	ChannelTool      Channel = "tool" // a tool's result
	ChannelText      Channel = "text" // raw text that is not a conversation
)
