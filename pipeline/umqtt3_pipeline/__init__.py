"""umqtt3_pipeline: MQTT messages from umqtt3 nodes into Spark (CPython only).

log        the segmented ingest log (durable before the broker gets its ack)
ingest     the umqtt3 client that fills the log
source     the Spark data source "umqtt3": stream reader and batch reader
telemetry  the firmware's message format: parsing and the de-duplication key
job        the telemetry job (python -m umqtt3_pipeline.job)
output     the job's Parquet files: by day, a file per batch, folded into one per day
plot       each node's windowed series as a PNG
cli        the command lines' shared parser
"""
