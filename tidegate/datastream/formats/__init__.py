"""PyFlink's `pyflink.datastream.formats`: JSON, CSV and Avro row schemas in `json`, `csv` and
`avro` (implemented in tidegate/formats), Parquet files in `parquet`, and tidegate's
dead-letter routing (`dead_letters`)."""
