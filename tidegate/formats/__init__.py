"""Row formats: JSON, CSV and Avro (de)serialization schemas, with PyFlink's names, for the
connectors (a source calls `deserialize(bytes)`, a sink `serialize(record)`).

The user-facing paths are PyFlink's: `tidegate.datastream.formats.json / csv / avro` re-export
the schemas from here; connectors import them from here (this package sits below
`connectors` and depends on `common` only)."""
