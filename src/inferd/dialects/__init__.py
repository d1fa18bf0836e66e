"""Translation between the chat-completions dialect and the others the server speaks (Anthropic's
Messages, OpenAI's Responses): pure functions over parsed JSON, no I/O. The wire shapes they map
between are documented in `protocol/`; routes in `api/` and services call these."""
