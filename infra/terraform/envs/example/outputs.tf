output "bucket" {
  description = "The Strata bucket (the source of truth: back it up, never empty it)."
  value       = module.storage.bucket_name
}

output "ingest_http" {
  description = "Data API and SQL with writes (curl $ingest_http/sql -d '...')."
  value       = module.ingest.endpoint_http
}

output "ingest_flight" {
  description = "Flight SQL and gRPC data API of the ingest nodes (strata sql --flight)."
  value       = module.ingest.endpoint_flight
}

output "query_http" {
  description = "Read-only SQL over HTTP."
  value       = module.query.endpoint_http
}

output "query_flight" {
  description = "Read-only Flight SQL."
  value       = module.query.endpoint_flight
}

output "alarm_topic_arn" {
  description = "SNS topic of every Strata alarm."
  value       = module.observability.alarm_topic_arn
}
