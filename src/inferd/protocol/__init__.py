"""Wire schemas (pydantic), one module per api/ module; they hold no logic."""
