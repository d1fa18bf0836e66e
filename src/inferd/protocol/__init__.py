"""Wire schemas (pydantic), one module per api/ module, and the checks of the fields they describe
(`checks.py`, and the chat request's beside its schema): no translation, no I/O."""
