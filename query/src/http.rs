//! HTTP endpoint.
