//! An ingest node's identity as other nodes and errors name it. A record type with no
//! dependencies, below both the error type and the cluster membership that uses it.

use serde::{Deserialize, Serialize};

/// An ingest node as other nodes see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its name.
    pub name: String,
    /// Its HTTP address.
    pub http: String,
    /// Its gRPC address.
    pub flight: String,
}
