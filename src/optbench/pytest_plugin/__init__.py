"""The pytest plugin: thin hooks, options, the runner that measures a case and writes its row."""
