//! Object-store settings (serde, from file and environment); kept apart from the built
//! components.

use serde::{Deserialize, Serialize};

use crate::fault::FaultConfig;

/// Which object store to use and how to wrap it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// The backend.
    pub backend: BackendConfig,
    /// Retry policy for transient failures.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Latency and fault injection (tests and benchmarks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultConfig>,
}

impl ObjectStoreConfig {
    /// A local directory store with default retries.
    pub fn local(path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            backend: BackendConfig::Local { path: path.into() },
            retry: RetryConfig::default(),
            fault: None,
        }
    }

    /// An in-memory store (tests).
    pub fn memory() -> Self {
        Self {
            backend: BackendConfig::Memory,
            retry: RetryConfig::default(),
            fault: None,
        }
    }

    /// An S3 store.
    pub fn s3(s3: S3Config) -> Self {
        Self {
            backend: BackendConfig::S3(s3),
            retry: RetryConfig::default(),
            fault: None,
        }
    }
}

/// The storage backend.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackendConfig {
    /// A local directory standing in for the bucket (the embedded default).
    Local {
        /// Root directory; created if missing.
        path: std::path::PathBuf,
    },
    /// Process memory; lost on exit (tests).
    Memory,
    /// Amazon S3 or an S3-compatible endpoint such as LocalStack.
    S3(S3Config),
}

/// S3 settings. Credentials and (unless given) region and endpoint come from the AWS SDK's
/// standard chain: environment, shared config/credentials files, SSO, web identity, ECS and
/// EC2 instance metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// Region override; default from the SDK chain, then `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint override (e.g. `http://127.0.0.1:4566` for LocalStack); default from the
    /// SDK chain (`AWS_ENDPOINT_URL`), then AWS.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Per-request timeout in milliseconds.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn default_request_timeout_ms() -> u64 {
    30_000
}

/// Retry policy for transient store errors: exponential backoff with full jitter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Attempts in total, including the first (1 disables retries).
    pub attempts_max: u32,
    /// First backoff in milliseconds.
    pub backoff_ms_initial: u64,
    /// Largest backoff in milliseconds.
    pub backoff_ms_max: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            attempts_max: 6,
            backoff_ms_initial: 20,
            backoff_ms_max: 2_000,
        }
    }
}
