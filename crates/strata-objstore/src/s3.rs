//! The S3 backend: `object_store`'s S3 client configured from the AWS SDK for Rust's
//! standard configuration (`aws-config`: credential chain, region, endpoint override).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_credential_types::provider::ProvideCredentials;
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsCredential, S3ConditionalPut};
use object_store::{ClientOptions, CredentialProvider};

use crate::config::S3Config;
use crate::error::{Error, Result};

/// Adapts the SDK's (cached, refreshing) credentials provider to `object_store`.
#[derive(Debug)]
struct SdkCredentials {
    provider: aws_credential_types::provider::SharedCredentialsProvider,
}

#[async_trait]
impl CredentialProvider for SdkCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let c = self.provider.provide_credentials().await.map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }
        })?;
        Ok(Arc::new(AwsCredential {
            key_id: c.access_key_id().to_string(),
            secret_key: c.secret_access_key().to_string(),
            token: c.session_token().map(str::to_string),
        }))
    }
}

/// Builds the S3 store. Retries are left to [`crate::RetryingStore`] (the client's own
/// retries are disabled) so that one layer decides, and can disambiguate conditional
/// writes whose response was lost.
pub async fn build(config: &S3Config) -> Result<AmazonS3> {
    if config.bucket.is_empty() {
        return Err(Error::Config("s3 bucket name is empty".into()));
    }
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = &config.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(endpoint) = &config.endpoint {
        loader = loader.endpoint_url(endpoint.clone());
    }
    let sdk = loader.load().await;
    let provider = sdk.credentials_provider().ok_or_else(|| {
        Error::Aws("no credentials provider resolved by the AWS SDK default chain".into())
    })?;
    let region = sdk
        .region()
        .map(|r| r.to_string())
        .unwrap_or_else(|| "us-east-1".to_string());
    let retry = object_store::RetryConfig {
        max_retries: 0,
        ..Default::default()
    };
    let client = ClientOptions::new()
        .with_timeout(Duration::from_millis(config.request_timeout_ms))
        .with_connect_timeout(Duration::from_secs(5));
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&config.bucket)
        .with_region(region)
        .with_credentials(Arc::new(SdkCredentials { provider }))
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(retry);
    if let Some(endpoint) = sdk.endpoint_url() {
        // Custom endpoints (LocalStack, MinIO) use path-style requests.
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false);
        let client = client.with_allow_http(endpoint.starts_with("http://"));
        builder = builder.with_client_options(client);
    } else {
        builder = builder.with_client_options(client);
    }
    Ok(builder.build()?)
}
