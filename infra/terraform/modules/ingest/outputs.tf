output "endpoint_http" {
  description = "Data API, POST /sql, /health, /ready and /metrics of the ingest nodes (http:// or, with certificate_arn, https://)."
  value       = "${var.certificate_arn != "" ? "https" : "http"}://${aws_lb.ingest.dns_name}:${var.http_port}"
}

output "endpoint_flight" {
  description = "Arrow Flight SQL and gRPC data API of the ingest nodes (host:port for `strata sql --flight`)."
  value       = "${aws_lb.ingest.dns_name}:${var.flight_port}"
}

output "load_balancer_arn_suffix" {
  description = "ARN suffix of the network load balancer (CloudWatch dimension LoadBalancer)."
  value       = aws_lb.ingest.arn_suffix
}

output "target_group_arn_suffixes" {
  description = "ARN suffixes of the target groups (CloudWatch dimension TargetGroup), keys http and flight."
  value       = { for k, tg in aws_lb_target_group.ingest : k => tg.arn_suffix }
}

output "autoscaling_group_name" {
  description = "Auto-scaling group of the ingest nodes."
  value       = module.nodes.autoscaling_group_name
}

output "security_group_id" {
  description = "Security group of the ingest nodes."
  value       = module.nodes.security_group_id
}

output "strata_config" {
  description = "The rendered strata.toml of the ingest nodes (what `strata config --role ingest --config` checks at boot)."
  value       = local.strata_config
}
