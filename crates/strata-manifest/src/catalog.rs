//! The cluster catalog: tables, their schemas, primary keys and shards.

use std::collections::BTreeMap;

use arrow_schema::Schema;
use serde::{Deserialize, Serialize};

use crate::versioned::Invariants;

/// The catalog format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Whether a table is relational or a key-value namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    /// Rows with an Arrow schema.
    Table,
    /// `key: binary` (primary key), `value: binary`.
    KeyValue,
}

/// One shard: a primary-key range `[key_start, key_end)` in encoded key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Shard id, unique within the table.
    pub id: u32,
    /// Inclusive lower bound (empty = unbounded).
    #[serde(with = "crate::hexbytes")]
    pub key_start: Vec<u8>,
    /// Exclusive upper bound (`None` = unbounded).
    #[serde(with = "crate::hexbytes::option")]
    pub key_end: Option<Vec<u8>>,
}

/// One table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableEntry {
    /// Never reused.
    pub id: u64,
    /// Name, unique among live tables.
    pub name: String,
    /// Relational table or key-value namespace.
    pub kind: TableKind,
    /// The Arrow schema.
    pub schema: Schema,
    /// Primary-key column names, in key order.
    pub primary_key: Vec<String>,
    /// Shards covering the whole key space.
    pub shards: Vec<ShardEntry>,
    /// Column groups per S3 level (LASER §4): `column_groups[i]` partitions the non-key
    /// columns for S3 level i+1; each group of a level lies inside one group of the level
    /// above. Empty = the engine's default number of S3 levels, one group each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub column_groups: Vec<Vec<Vec<String>>>,
    /// Creation time.
    pub created_at_ms: u64,
}

/// A dropped table whose objects await garbage collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedTable {
    /// Table id.
    pub id: u64,
    /// Name it had.
    pub name: String,
    /// When it was dropped.
    pub dropped_at_ms: u64,
}

/// The catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// Format of this document.
    pub format_version: u32,
    /// The next table id to assign.
    pub next_table_id: u64,
    /// Live tables by name.
    pub tables: BTreeMap<String, TableEntry>,
    /// Dropped tables not yet purged.
    pub dropped: Vec<DroppedTable>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            format_version: FORMAT_VERSION,
            next_table_id: 1,
            tables: BTreeMap::new(),
            dropped: Vec::new(),
        }
    }
}

impl Invariants for Catalog {
    fn check(&self, prev: Option<&Self>) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "unsupported catalog format {}",
                self.format_version
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for (name, t) in &self.tables {
            if name != &t.name {
                return Err(format!("table keyed {name} is named {}", t.name));
            }
            if t.id >= self.next_table_id || !ids.insert(t.id) {
                return Err(format!(
                    "table {name} has a duplicate or unassigned id {}",
                    t.id
                ));
            }
            if t.shards.is_empty() {
                return Err(format!("table {name} has no shards"));
            }
            for pk in &t.primary_key {
                if t.schema.field_with_name(pk).is_err() {
                    return Err(format!("table {name}: key column {pk} not in schema"));
                }
            }
        }
        if let Some(p) = prev
            && self.next_table_id < p.next_table_id
        {
            return Err("next_table_id went backwards (ids would be reused)".into());
        }
        Ok(())
    }
}
