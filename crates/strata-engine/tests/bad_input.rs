//! Bad input gets a clear error naming the problem, and changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use common::*;
use strata_common::ErrorKind;
use strata_engine::{EngineConfig, Mutation, ScanOptions, WriteOptions};

async fn setup(
    config: EngineConfig,
) -> (tempfile::TempDir, strata_engine::Db, strata_engine::Table) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&memory_store(), dir.path(), config).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("keep")], &[Some(1)]))
        .await
        .unwrap();
    (dir, db, t)
}

async fn unchanged(t: &strata_engine::Table, seq_before: u64) {
    assert_eq!(
        t.shards().next().unwrap().last_seq(),
        seq_before,
        "a rejected batch must not consume a sequence number"
    );
    assert_eq!(
        decode(&t.scan(&ScanOptions::default(), None).await.unwrap()),
        vec![(1, Some("keep".into()), Some(1))]
    );
}

#[tokio::test]
async fn wrong_schema_is_rejected_whole() {
    let (_d, _db, t) = setup(EngineConfig::default()).await;
    let seq = t.shards().next().unwrap().last_seq();

    // Wrong type for b.
    let bad = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Int32, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![2])) as ArrayRef,
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(Int32Array::from(vec![1])),
        ],
    )
    .unwrap();
    let err = t.upsert(bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string()
            .contains("column b has type Int32, the table declares Int64"),
        "{err}"
    );

    // Unknown column.
    let err = t
        .update(only(&[("id", Arc::new(Int64Array::from(vec![1])))]).with_extra("zzz"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("zzz is not in table t"), "{err}");

    // Upsert missing a column.
    let err = t
        .upsert(only(&[
            ("id", Arc::new(Int64Array::from(vec![1]))),
            ("a", Arc::new(StringArray::from(vec!["x"]))),
        ]))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("upsert is missing column b"),
        "{err}"
    );
    unchanged(&t, seq).await;
}

trait WithExtra {
    fn with_extra(self, name: &str) -> RecordBatch;
}
impl WithExtra for RecordBatch {
    fn with_extra(self, name: &str) -> RecordBatch {
        let mut fields: Vec<Field> = self
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(name, DataType::Int64, true));
        let mut cols = self.columns().to_vec();
        cols.push(Arc::new(Int64Array::from(vec![0; self.num_rows()])));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }
}

#[tokio::test]
async fn null_key_rejects_the_whole_batch() {
    let (_d, _db, t) = setup(EngineConfig::default()).await;
    let seq = t.shards().next().unwrap().last_seq();
    // Row 0 is fine, row 1 has a null key: nothing of the batch may be written.
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Int64, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![Some(5), None])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("x"), Some("y")])),
            Arc::new(Int64Array::from(vec![Some(1), Some(2)])),
        ],
    )
    .unwrap();
    let err = t.upsert(batch).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string().contains("row 1: key column id is null"),
        "{err}"
    );
    unchanged(&t, seq).await;
}

#[tokio::test]
async fn oversized_value_and_key_are_rejected() {
    let mut config = EngineConfig::default();
    config.value_bytes_max = 1024;
    config.key_bytes_max = 64;
    let (_d, db, t) = setup(config).await;
    let seq = t.shards().next().unwrap().last_seq();
    let big = "x".repeat(2000);
    let err = t
        .upsert(rows(&[7, 8], &[Some("ok"), Some(&big)], &[None, None]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("row 1: row is"), "{err}");
    assert!(err.to_string().contains("the limit is 1024"), "{err}");
    unchanged(&t, seq).await;

    db.create_kv_namespace("kv").await.unwrap();
    let kv = db.table("kv").await.unwrap();
    let err = kv
        .kv_put(&[(&[1u8; 100], b"v")], WriteOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("key is"), "{err}");
    assert_eq!(kv.kv_get(&[1u8; 100]).await.unwrap(), None);
}

#[tokio::test]
async fn unknown_table_and_bad_definitions() {
    let (_d, db, t) = setup(EngineConfig::default()).await;
    let err = db.table("nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("table not found: nope"));
    assert_eq!(
        db.drop_table("nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        db.create_table("t", schema(), &["id"])
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::AlreadyExists
    );
    let err = db
        .create_table("u", schema(), &["missing"])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("key column missing is not in the schema"),
        "{err}"
    );
    let err = db
        .create_table("bad name!", schema(), &["id"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = db.create_table("u", schema(), &[]).await.unwrap_err();
    assert!(err.to_string().contains("primary key"), "{err}");
    // Deletes carry keys only.
    let seq = t.shards().next().unwrap().last_seq();
    let err = t
        .write(
            &[Mutation::Delete(rows(&[1], &[None], &[None]))],
            WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("delete takes key columns only"),
        "{err}"
    );
    unchanged(&t, seq).await;
    assert_eq!(db.list_tables().await.unwrap().len(), 1);
}
