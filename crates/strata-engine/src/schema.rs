//! A table's schema as the engine uses it: which columns form the key, how rows encode, how
//! write batches are validated and turned into versions, and how versions become Arrow rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use strata_manifest::{TableEntry, TableKind};

use crate::config::EngineConfig;
use crate::entry::{EntryKind, Folded};
use crate::error::{Error, Result};
use crate::keycodec;
use crate::row::{RowCodec, RowValues};
use crate::value::{self, Value};

/// One part of a write batch. Every part of a batch commits atomically (per shard) under
/// one sequence number; later rows for the same key win over earlier ones.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Whole rows: every column of the table.
    Upsert(RecordBatch),
    /// Some columns (the key columns plus at least one other); the rest keep their values.
    Update(RecordBatch),
    /// Deletes by key: the key columns only.
    Delete(RecordBatch),
}

/// A validated version ready for the WAL and memtable.
#[derive(Debug, Clone)]
pub struct PreparedEntry {
    /// Encoded key.
    pub key: Bytes,
    /// Kind.
    pub kind: EntryKind,
    /// Encoded row.
    pub value: Bytes,
}

/// Checks a table definition; the error names the offending column.
pub fn validate_definition(schema: &Schema, primary_key: &[String]) -> Result<()> {
    if primary_key.is_empty() {
        return Err(Error::Invalid(
            "a table needs a primary key of at least one column".into(),
        ));
    }
    if schema.fields().is_empty() {
        return Err(Error::Invalid("a table needs at least one column".into()));
    }
    let mut seen = std::collections::HashSet::new();
    for f in schema.fields() {
        if !seen.insert(f.name()) {
            return Err(Error::Invalid(format!("column {} appears twice", f.name())));
        }
        if f.name().is_empty() {
            return Err(Error::Invalid("column names must not be empty".into()));
        }
        if RESERVED_COLUMNS.contains(&f.name().as_str()) {
            return Err(Error::Invalid(format!(
                "column name {} is reserved for the engine's Parquet files",
                f.name()
            )));
        }
        if !value::is_supported(f.data_type()) {
            return Err(Error::Invalid(format!(
                "column {}: type {} is not supported",
                f.name(),
                f.data_type()
            )));
        }
    }
    let mut pk_seen = std::collections::HashSet::new();
    for k in primary_key {
        if !pk_seen.insert(k) {
            return Err(Error::Invalid(format!("key column {k} listed twice")));
        }
        let f = schema
            .field_with_name(k)
            .map_err(|_| Error::Invalid(format!("key column {k} is not in the schema")))?;
        if matches!(f.data_type(), DataType::Float32 | DataType::Float64) {
            return Err(Error::Invalid(format!(
                "key column {k}: floating-point keys are not allowed"
            )));
        }
    }
    Ok(())
}

/// Column names the S3 levels' files use for their own columns.
pub const RESERVED_COLUMNS: [&str; 4] = ["_key", "_seq", "_kind", "_present"];

/// Column groups per S3 level, by column name.
pub type ColumnGroupLayout = Vec<Vec<Vec<String>>>;

/// The default layout: `levels` S3 levels of one group holding every non-key column.
pub fn default_layout(schema: &Schema, primary_key: &[String], levels: usize) -> ColumnGroupLayout {
    let cols: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| !primary_key.contains(n))
        .collect();
    vec![vec![cols]; levels.max(1)]
}

/// Checks a column-group layout (LASER §4): every S3 level partitions the non-key columns
/// into non-empty groups, and every group of level i+1 lies inside one group of level i.
pub fn validate_layout(
    schema: &Schema,
    primary_key: &[String],
    layout: &[Vec<Vec<String>>],
) -> Result<()> {
    if layout.is_empty() {
        return Err(Error::Invalid(
            "a column-group layout needs at least one S3 level".into(),
        ));
    }
    let non_key: Vec<&String> = schema
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|n| !primary_key.contains(n))
        .collect();
    for (li, level) in layout.iter().enumerate() {
        let name = format!("S3 level {}", li + 1);
        let mut seen = std::collections::HashSet::new();
        for (gi, group) in level.iter().enumerate() {
            if group.is_empty() && !non_key.is_empty() {
                return Err(Error::Invalid(format!(
                    "{name}: column group {gi} is empty"
                )));
            }
            for c in group {
                if primary_key.contains(c) {
                    return Err(Error::Invalid(format!(
                        "{name}: key column {c} cannot be in a column group (every group carries the key)"
                    )));
                }
                if schema.field_with_name(c).is_err() {
                    return Err(Error::Invalid(format!(
                        "{name}: column {c} of group {gi} is not in the schema"
                    )));
                }
                if !seen.insert(c.as_str()) {
                    return Err(Error::Invalid(format!(
                        "{name}: column {c} is in more than one group"
                    )));
                }
            }
        }
        if let Some(missing) = non_key.iter().find(|c| !seen.contains(c.as_str())) {
            return Err(Error::Invalid(format!(
                "{name}: column {missing} is in no group (each level must partition the non-key columns)"
            )));
        }
        if non_key.is_empty() && level.len() != 1 {
            return Err(Error::Invalid(format!(
                "{name}: a table without non-key columns has exactly one (empty) group"
            )));
        }
        if li > 0 {
            for (gi, group) in level.iter().enumerate() {
                let inside = layout[li - 1]
                    .iter()
                    .any(|upper| group.iter().all(|c| upper.contains(c)));
                if !inside {
                    return Err(Error::Invalid(format!(
                        "{name}: group {gi} {group:?} is not inside one group of S3 level {li} (deeper levels may only split groups)"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The schema of a key-value namespace.
pub fn key_value_schema() -> Schema {
    Schema::new(vec![
        Field::new("key", DataType::Binary, false),
        Field::new("value", DataType::Binary, true),
    ])
}

/// S3 levels of a table created without a layout.
pub const DEFAULT_S3_LEVELS: usize = 2;

/// The engine's view of one table.
#[derive(Debug)]
pub struct TableSchema {
    /// Catalog entry.
    pub entry: TableEntry,
    /// The declared schema.
    pub schema: SchemaRef,
    /// The schema of rows read back: the declared one with non-key columns nullable (a
    /// partial update of a missing row leaves the columns it did not write NULL).
    pub read_schema: SchemaRef,
    /// Indices of the key columns in `schema`, in key order.
    pub key_indices: Vec<usize>,
    /// Types of the key columns.
    pub key_types: Vec<DataType>,
    /// Indices of the non-key columns in `schema`.
    pub value_indices: Vec<usize>,
    /// Codec of the non-key columns.
    pub codec: RowCodec,
    /// Column groups per S3 level.
    pub groups: Vec<Vec<Arc<crate::columnar::GroupFormat>>>,
}

impl TableSchema {
    /// Builds the view of a catalog entry.
    pub fn new(entry: TableEntry) -> Result<Self> {
        validate_definition(&entry.schema, &entry.primary_key)?;
        let schema = Arc::new(entry.schema.clone());
        let key_indices: Vec<usize> = entry
            .primary_key
            .iter()
            .map(|k| {
                schema
                    .index_of(k)
                    .map_err(|e| Error::Internal(e.to_string()))
            })
            .collect::<Result<_>>()?;
        let key_types = key_indices
            .iter()
            .map(|i| schema.field(*i).data_type().clone())
            .collect();
        let value_indices: Vec<usize> = (0..schema.fields().len())
            .filter(|i| !key_indices.contains(i))
            .collect();
        let codec = RowCodec::new(
            value_indices
                .iter()
                .map(|i| schema.field(*i).data_type().clone())
                .collect(),
        );
        let read_schema = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    if key_indices.contains(&i) {
                        f.as_ref().clone().with_nullable(false)
                    } else {
                        f.as_ref().clone().with_nullable(true)
                    }
                })
                .collect::<Vec<_>>(),
        ));
        let layout = if entry.column_groups.is_empty() {
            default_layout(&entry.schema, &entry.primary_key, DEFAULT_S3_LEVELS)
        } else {
            entry.column_groups.clone()
        };
        validate_layout(&entry.schema, &entry.primary_key, &layout)?;
        let mut me = Self {
            entry,
            schema,
            read_schema,
            key_indices,
            key_types,
            value_indices,
            codec,
            groups: Vec::new(),
        };
        let mut groups = Vec::with_capacity(layout.len());
        for level in &layout {
            let mut formats = Vec::with_capacity(level.len());
            for group in level {
                let cols = group
                    .iter()
                    .map(|c| {
                        let i = me
                            .schema
                            .index_of(c)
                            .map_err(|e| Error::Internal(e.to_string()))?;
                        me.value_indices
                            .iter()
                            .position(|v| *v == i)
                            .ok_or_else(|| Error::Internal(format!("{c} is a key column")))
                    })
                    .collect::<Result<Vec<usize>>>()?;
                formats.push(Arc::new(crate::columnar::GroupFormat::new(
                    &me.schema,
                    &me.key_indices,
                    &me.value_indices,
                    cols,
                )));
            }
            groups.push(formats);
        }
        me.groups = groups;
        Ok(me)
    }

    /// The group of S3 level `level - 1` (0-based) that contains group `group` of `level`.
    pub fn parent_group(&self, level: usize, group: usize) -> Option<usize> {
        let child = &self.groups.get(level)?.get(group)?.columns;
        self.groups
            .get(level.checked_sub(1)?)?
            .iter()
            .position(|g| child.iter().all(|c| g.columns.contains(c)))
    }

    /// Groups of `level` inside group `group` of level `level - 1` (for level 0: all).
    pub fn child_groups(&self, level: usize, parent: Option<usize>) -> Vec<usize> {
        let Some(groups) = self.groups.get(level) else {
            return Vec::new();
        };
        (0..groups.len())
            .filter(|g| parent.is_none() || self.parent_group(level, *g) == parent)
            .collect()
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// Whether this is a key-value namespace.
    pub fn is_key_value(&self) -> bool {
        self.entry.kind == TableKind::KeyValue
    }

    /// Encodes a key given as values of the key columns.
    pub fn encode_key(&self, key: &[Value]) -> Result<Vec<u8>> {
        keycodec::encode_key(&self.key_types, key)
    }

    /// Resolves a projection (column names) to schema indices; `None` = all columns.
    pub fn projection(&self, columns: Option<&[&str]>) -> Result<Vec<usize>> {
        match columns {
            None => Ok((0..self.schema.fields().len()).collect()),
            Some(cols) => cols
                .iter()
                .map(|c| {
                    self.schema.index_of(c).map_err(|_| {
                        Error::Invalid(format!("unknown column {c} in table {}", self.name()))
                    })
                })
                .collect(),
        }
    }

    /// Validates every mutation (rejecting the whole batch on the first bad row) and returns
    /// one version per key, sorted by key.
    pub fn prepare(
        &self,
        mutations: &[Mutation],
        limits: &EngineConfig,
    ) -> Result<Vec<PreparedEntry>> {
        let mut out: BTreeMap<Vec<u8>, Folded> = BTreeMap::new();
        let mut total = 0usize;
        for (mi, m) in mutations.iter().enumerate() {
            let (batch, kind) = match m {
                Mutation::Upsert(b) => (b, EntryKind::Put),
                Mutation::Update(b) => (b, EntryKind::Partial),
                Mutation::Delete(b) => (b, EntryKind::Delete),
            };
            let cols = self.check_columns(batch, kind, mi)?;
            for row in 0..batch.num_rows() {
                let mut key_values = Vec::with_capacity(self.key_indices.len());
                for (ki, &ci) in self.key_indices.iter().enumerate() {
                    let arr =
                        batch.column(cols[ci].ok_or_else(|| {
                            Error::Internal("key column resolved as absent".into())
                        })?);
                    if arr.is_null(row) {
                        return Err(Error::Invalid(format!(
                            "mutation {mi}, row {row}: key column {} is null",
                            self.entry.primary_key[ki]
                        )));
                    }
                    key_values.push(value::value_at(arr.as_ref(), row)?);
                }
                let key = self.encode_key(&key_values)?;
                if key.len() > limits.key_bytes_max {
                    return Err(Error::Invalid(format!(
                        "mutation {mi}, row {row}: key is {} bytes, the limit is {}",
                        key.len(),
                        limits.key_bytes_max
                    )));
                }
                let mut values: RowValues = vec![None; self.value_indices.len()];
                if kind != EntryKind::Delete {
                    for (vi, &ci) in self.value_indices.iter().enumerate() {
                        let Some(bi) = cols[ci] else { continue };
                        let arr = batch.column(bi);
                        let field = self.schema.field(ci);
                        if arr.is_null(row) && !field.is_nullable() {
                            return Err(Error::Invalid(format!(
                                "mutation {mi}, row {row}: column {} is not nullable but is null",
                                field.name()
                            )));
                        }
                        values[vi] = Some(value::value_at(arr.as_ref(), row)?);
                    }
                }
                let encoded = self.codec.encode(&values)?;
                if encoded.len() > limits.value_bytes_max {
                    return Err(Error::Invalid(format!(
                        "mutation {mi}, row {row}: row is {} bytes, the limit is {}",
                        encoded.len(),
                        limits.value_bytes_max
                    )));
                }
                total += key.len() + encoded.len() + 16;
                if total > limits.batch_bytes_max {
                    return Err(Error::Invalid(format!(
                        "batch exceeds {} bytes; split it",
                        limits.batch_bytes_max
                    )));
                }
                let newer = Folded::from_entry(&self.codec, kind, &encoded)?;
                match out.remove(&key) {
                    None => {
                        out.insert(key, newer);
                    }
                    Some(older) => {
                        let mut merged = newer;
                        let older_bytes = older.encode(&self.codec)?;
                        merged.merge_older(&self.codec, older.kind, &older_bytes)?;
                        out.insert(key, merged);
                    }
                }
            }
        }
        out.into_iter()
            .map(|(key, f)| {
                Ok(PreparedEntry {
                    key: Bytes::from(key),
                    kind: f.kind,
                    value: f.encode(&self.codec)?,
                })
            })
            .collect()
    }

    /// Maps each schema column to its index in `batch` (None = absent), checking names,
    /// types and which columns each kind of mutation must carry.
    fn check_columns(
        &self,
        batch: &RecordBatch,
        kind: EntryKind,
        mi: usize,
    ) -> Result<Vec<Option<usize>>> {
        let mut cols = vec![None; self.schema.fields().len()];
        for (bi, f) in batch.schema().fields().iter().enumerate() {
            let ci = self.schema.index_of(f.name()).map_err(|_| {
                Error::Invalid(format!(
                    "mutation {mi}: column {} is not in table {}",
                    f.name(),
                    self.name()
                ))
            })?;
            let want = self.schema.field(ci).data_type();
            if f.data_type() != want {
                return Err(Error::Invalid(format!(
                    "mutation {mi}: column {} has type {}, the table declares {}",
                    f.name(),
                    f.data_type(),
                    want
                )));
            }
            if cols[ci].replace(bi).is_some() {
                return Err(Error::Invalid(format!(
                    "mutation {mi}: column {} appears twice",
                    f.name()
                )));
            }
        }
        for (ki, &ci) in self.key_indices.iter().enumerate() {
            if cols[ci].is_none() {
                return Err(Error::Invalid(format!(
                    "mutation {mi}: key column {} is missing",
                    self.entry.primary_key[ki]
                )));
            }
        }
        match kind {
            EntryKind::Put => {
                if let Some(&ci) = self.value_indices.iter().find(|&&ci| cols[ci].is_none()) {
                    return Err(Error::Invalid(format!(
                        "mutation {mi}: upsert is missing column {}; use an update to change some columns",
                        self.schema.field(ci).name()
                    )));
                }
            }
            EntryKind::Partial => {
                if !self.value_indices.is_empty()
                    && self.value_indices.iter().all(|&ci| cols[ci].is_none())
                {
                    return Err(Error::Invalid(format!(
                        "mutation {mi}: update carries no non-key column"
                    )));
                }
            }
            EntryKind::Delete => {
                if let Some(&ci) = self.value_indices.iter().find(|&&ci| cols[ci].is_some()) {
                    return Err(Error::Invalid(format!(
                        "mutation {mi}: delete takes key columns only, got {}",
                        self.schema.field(ci).name()
                    )));
                }
            }
        }
        Ok(cols)
    }

    /// Builds a batch of `rows` (encoded key, full row values) with the columns `projection`.
    pub fn to_batch(
        &self,
        rows: &[(Bytes, RowValues)],
        projection: &[usize],
    ) -> Result<RecordBatch> {
        self.build_batch(
            rows.iter().map(|(k, _)| k),
            rows.len(),
            projection,
            |vi, dt| {
                let column: Vec<Value> = rows
                    .iter()
                    .map(|(_, vals)| vals[vi].clone().unwrap_or(Value::Null))
                    .collect();
                value::build_array(dt, &column)
            },
        )
    }

    /// Whole rows as [`Self::to_batch`] builds them, from their encoded keys and values
    /// (see [`crate::row::RowCodec`]): the values decoded in bulk, column by column, not
    /// one value at a time.
    pub fn encoded_to_batch(
        &self,
        rows: &[(Bytes, Bytes)],
        projection: &[usize],
    ) -> Result<RecordBatch> {
        let values = self
            .codec
            .decode_columns(rows.iter().map(|(_, v)| v.as_ref()))?;
        self.build_batch(
            rows.iter().map(|(k, _)| k),
            rows.len(),
            projection,
            |vi, _| Ok(values[vi].clone()),
        )
    }

    /// A batch of `n` rows with the columns `projection`: key columns decoded from `keys`,
    /// value column `vi` (of type `dt`) from `value_column(vi, dt)`.
    fn build_batch<'a>(
        &self,
        keys: impl Iterator<Item = &'a Bytes>,
        n: usize,
        projection: &[usize],
        mut value_column: impl FnMut(usize, &DataType) -> Result<ArrayRef>,
    ) -> Result<RecordBatch> {
        let fields: Vec<Field> = projection
            .iter()
            .map(|&i| self.read_schema.field(i).clone())
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let keys: Vec<Vec<Value>> = keys
            .map(|k| keycodec::decode_key(&self.key_types, k))
            .collect::<Result<_>>()?;
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(projection.len());
        for &ci in projection {
            let dt = self.schema.field(ci).data_type();
            if let Some(ki) = self.key_indices.iter().position(|&k| k == ci) {
                let column: Vec<Value> = keys.iter().map(|k| k[ki].clone()).collect();
                arrays.push(value::build_array(dt, &column)?);
            } else {
                let vi = self
                    .value_indices
                    .iter()
                    .position(|&v| v == ci)
                    .ok_or_else(|| Error::Internal("column neither key nor value".into()))?;
                arrays.push(value_column(vi, dt)?);
            }
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        RecordBatch::try_new_with_options(schema, arrays, &options)
            .map_err(|e| Error::Internal(format!("building result batch: {e}")))
    }
}
