"""OpenTelemetry traces (`[tracing]`): a server span per request, a child per engine attempt, a
span for a generate turn's retrieval, exported over OTLP/HTTP off the request path.

The request path records spans as small `SpanRecord`s (spans.py): a dict of attributes and a
few numbers, about a microsecond and a half each, where an OpenTelemetry SDK span with the same
attributes cost about 30 µs. The export thread (export.py) turns them into the SDK's
`ReadableSpan`s and hands them to its OTLP/HTTP exporter. Only export.py imports
`opentelemetry`, and only `start_tracing` imports export.py: with tracing off the package is
never loaded past these modules, and each hook on the request path is one test of `None`.
"""
