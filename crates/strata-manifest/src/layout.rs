//! Where things live in the bucket. Every object name is built here.
//!
//! ```text
//! <root>/catalog/<version>.json                        cluster catalog chain
//! <root>/tables/<table id>/<shard id>/manifest/<v>.json shard manifest chain
//! <root>/tables/<table id>/<shard id>/wal/<id>.wal      WAL segments (empty = fence)
//! <root>/tables/<table id>/<shard id>/sst/<id>.sst      row SSTs
//! <root>/tables/<table id>/<shard id>/parquet/<name>.parquet  S3-level column-group files
//! <root>/tables/<table id>/<shard id>/pins/<reader>.json  durable snapshot pins of readers
//! <root>/jobs/<job id>.json                             published compaction jobs
//! <root>/jobs/<job id>.lease                            a worker's claim (heartbeat = CAS)
//! <root>/jobs/<job id>.result                           a worker's output, awaiting commit
//! <root>/cluster/nodes/<node>.json                      an ingest node's liveness record
//! <root>/cluster/leases/<table id>-<shard id>.json      which ingest node owns a shard
//! ```

use object_store::path::Path;
use strata_common::ids::format_id;

/// The bucket layout under a root prefix.
#[derive(Debug, Clone)]
pub struct Layout {
    root: Path,
}

impl Layout {
    /// A layout under `root` (may be empty for the bucket root).
    pub fn new(root: &str) -> Self {
        Self {
            root: Path::from(root.trim_matches('/')),
        }
    }

    /// The root prefix.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn join(&self, rest: &str) -> Path {
        if self.root.as_ref().is_empty() {
            Path::from(rest)
        } else {
            Path::from(format!("{}/{rest}", self.root))
        }
    }

    /// The catalog chain directory.
    pub fn catalog_dir(&self) -> Path {
        self.join("catalog")
    }

    /// The compaction job directory (shared by every shard, so workers find all jobs with
    /// one listing).
    pub fn jobs_dir(&self) -> Path {
        self.join("jobs")
    }

    /// A job's spec.
    pub fn job(&self, id: &str) -> Path {
        self.join(&format!("jobs/{id}.json"))
    }

    /// A job's lease.
    pub fn job_lease(&self, id: &str) -> Path {
        self.join(&format!("jobs/{id}.lease"))
    }

    /// A job's result.
    pub fn job_result(&self, id: &str) -> Path {
        self.join(&format!("jobs/{id}.result"))
    }

    /// Ingest nodes' liveness records (`cluster/nodes/<node>.json`).
    pub fn nodes_dir(&self) -> Path {
        self.join("cluster/nodes")
    }

    /// An ingest node's liveness record.
    pub fn node(&self, name: &str) -> Path {
        self.join(&format!("cluster/nodes/{name}.json"))
    }

    /// The shard ownership leases of every table.
    pub fn leases_dir(&self) -> Path {
        self.join("cluster/leases")
    }

    /// The ownership lease of a shard (`cluster/leases/<table id>-<shard>.json`).
    pub fn shard_lease(&self, table_id: u64, shard_id: u32) -> Path {
        self.join(&format!(
            "cluster/leases/{}-{:05}.json",
            format_id(table_id),
            shard_id
        ))
    }

    /// All objects of a table.
    pub fn table_dir(&self, table_id: u64) -> Path {
        self.join(&format!("tables/{}", format_id(table_id)))
    }

    /// The paths of one shard.
    pub fn shard(&self, table_id: u64, shard_id: u32) -> ShardPaths {
        ShardPaths {
            dir: self.join(&format!("tables/{}/{:05}", format_id(table_id), shard_id)),
        }
    }
}

/// Paths of one shard.
#[derive(Debug, Clone)]
pub struct ShardPaths {
    dir: Path,
}

impl ShardPaths {
    /// The paths of the shard stored at `dir` (as returned by [`ShardPaths::dir`]).
    pub fn from_dir(dir: &str) -> Self {
        Self {
            dir: Path::from(dir),
        }
    }

    /// The shard directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest chain directory.
    pub fn manifest_dir(&self) -> Path {
        Path::from(format!("{}/manifest", self.dir))
    }

    /// The WAL directory.
    pub fn wal_dir(&self) -> Path {
        Path::from(format!("{}/wal", self.dir))
    }

    /// One WAL segment.
    pub fn wal(&self, id: u64) -> Path {
        Path::from(format!("{}/wal/{}.wal", self.dir, format_id(id)))
    }

    /// The SST directory.
    pub fn sst_dir(&self) -> Path {
        Path::from(format!("{}/sst", self.dir))
    }

    /// One SST.
    pub fn sst(&self, id: &crate::SstId) -> Path {
        Path::from(format!("{}/sst/{}.sst", self.dir, id))
    }

    /// The Parquet directory.
    pub fn parquet_dir(&self) -> Path {
        Path::from(format!("{}/parquet", self.dir))
    }

    /// One Parquet file.
    pub fn parquet(&self, name: &str) -> Path {
        Path::from(format!("{}/parquet/{name}.parquet", self.dir))
    }

    /// The directory of durable snapshot pins (readers in other processes).
    pub fn pins_dir(&self) -> Path {
        Path::from(format!("{}/pins", self.dir))
    }

    /// One reader's pin.
    pub fn pin(&self, reader: &str) -> Path {
        Path::from(format!("{}/pins/{reader}.json", self.dir))
    }
}
