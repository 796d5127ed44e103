//! EXPLAIN shows what a scan pushes down: the key range from key predicates, the files it
//! reads and prunes, the column groups a projection needs; non-key predicates stay above
//! the scan.

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_key_range_file_pruning_and_column_groups() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = common::local_store(&tmp.path().join("bucket"));
    let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
    ]);
    // One S3 level with two column groups: {a} and {b}.
    db.create_table_with_layout(
        "w",
        schema.clone(),
        &["id"],
        vec![vec![vec!["a".into()], vec!["b".into()]]],
    )
    .await
    .expect("create");
    let t = db.table("w").await.expect("table");
    // Three drains of disjoint key ranges: three files per group in S3 level 1.
    let schema = Arc::new(schema);
    for part in 0..3i64 {
        let ids: Vec<i64> = (part * 1000..(part + 1) * 1000).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(Int64Array::from(
                    ids.iter().map(|i| i * 2).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    ids.iter().map(|i| i * 3).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("batch");
        t.upsert(batch).await.expect("upsert");
        t.flush().await.expect("flush");
        t.drain_to_bucket().await.expect("drain");
        t.wait_jobs().await.expect("jobs");
    }
    let q = common::service(&db, false);

    let plan = explain(&q, "SELECT a FROM w WHERE id = 1234").await;
    assert!(
        plan.contains("key_range=id: [Int(1234) .. Int(1235))"),
        "{plan}"
    );
    assert!(plan.contains("groups=[1]"), "one group of two read: {plan}");
    let (read, pruned) = parquet_counts(&plan);
    assert_eq!(read, 1, "{plan}");
    assert!(pruned > 1, "{plan}");
    assert_eq!(
        common::sql(&q, "SELECT a FROM w WHERE id = 1234").await,
        vec![vec!["2468".to_string()]]
    );

    // Comparisons of an integer key with literals are answered by the key range alone: no
    // filter above the scan, and the key column is not read for them.
    assert!(!plan.contains("FilterExec"), "{plan}");
    let plan = explain(&q, "SELECT sum(b) FROM w WHERE id >= 500 AND id < 2500").await;
    assert!(!plan.contains("FilterExec"), "{plan}");
    assert!(plan.contains("projection=[b]"), "{plan}");
    assert_eq!(
        common::sql(
            &q,
            "SELECT count(*), sum(b) FROM w WHERE id >= 500 AND id < 2500"
        )
        .await,
        vec![vec![
            "2000".to_string(),
            (3 * (500..2500).sum::<i64>()).to_string()
        ]]
    );
    for (sql, want) in [
        ("SELECT count(*) FROM w WHERE id > 999 AND id <= 1000", "1"),
        ("SELECT count(*) FROM w WHERE id BETWEEN 10 AND 19", "10"),
        ("SELECT count(*) FROM w WHERE id > 2999", "0"),
        ("SELECT count(*) FROM w WHERE 1000 > id", "1000"),
    ] {
        assert_eq!(
            common::sql(&q, sql).await,
            vec![vec![want.to_string()]],
            "{sql}"
        );
    }
    // An IN list is narrowed to its hull and filtered again above the scan.
    let plan = explain(&q, "SELECT a FROM w WHERE id IN (5, 2000)").await;
    assert!(plan.contains("FilterExec"), "{plan}");
    assert_eq!(
        common::sql(&q, "SELECT count(*) FROM w WHERE id IN (5, 2000)").await,
        vec![vec!["2".to_string()]]
    );

    // A non-key predicate is not pushed: every file of the needed groups is read and the
    // filter runs above the scan.
    let plan = explain(&q, "SELECT id FROM w WHERE b = 9").await;
    assert!(plan.contains("key_range=all"), "{plan}");
    assert!(plan.contains("FilterExec"), "{plan}");
    assert!(plan.contains("projection=[id, b]"), "{plan}");

    // Each partition yields its rows in key order: ORDER BY the key merges the partitions'
    // streams instead of sorting every row (a sort of a large table ran out of memory).
    let plan = explain(&q, "SELECT id, b FROM w ORDER BY id").await;
    assert!(plan.contains("SortPreservingMergeExec"), "{plan}");
    assert!(!plan.contains("SortExec"), "{plan}");
    let sorted = common::sql(&q, "SELECT id FROM w WHERE id >= 990 ORDER BY id LIMIT 20").await;
    let want: Vec<Vec<String>> = (990..1010).map(|i: i64| vec![i.to_string()]).collect();
    assert_eq!(sorted, want);
    // Descending: a sort (the order is ascending only).
    let plan = explain(&q, "SELECT id FROM w ORDER BY id DESC").await;
    assert!(plan.contains("SortExec"), "{plan}");

    // LIMIT without predicates reaches the scan.
    let plan = explain(&q, "SELECT id FROM w LIMIT 3").await;
    assert!(plan.contains("limit=3"), "{plan}");

    // EXPLAIN ANALYZE counts the rows by path: with 3 keys updated in the memtable, the
    // deep level's other rows pass through and those 3 are resolved row by row.
    let ids = vec![5i64, 1500, 2999];
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(Int64Array::from(vec![0i64; 3])),
            Arc::new(Int64Array::from(vec![0i64; 3])),
        ],
    )
    .expect("batch");
    t.upsert(batch).await.expect("upsert");
    let plan = explain(&q, "ANALYZE SELECT sum(a) FROM w").await;
    let metric = |name: &str| -> usize {
        let at = plan
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("{name}: {plan}"));
        let rest = &plan[at + name.len() + 1..];
        rest[..rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len())]
            .parse()
            .expect("count")
    };
    // 2997, shown rounded.
    assert!(plan.contains("rows_passed=3.00 K"), "{plan}");
    assert_eq!(metric("rows_patched"), 3, "{plan}");
    assert_eq!(metric("rows_merged"), 0, "{plan}");
    assert_eq!(
        metric("rows_positioned"),
        0,
        "memtable keys: by key: {plan}"
    );
    // Flushed, the 3 rows join the cached fold of the immutable tiers (built in the
    // background by a wide scan); then the deep level is read by row position and the 3
    // rows spliced from the fold.
    t.flush().await.expect("flush");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let plan = explain(&q, "ANALYZE SELECT sum(a) FROM w").await;
        if plan.contains("rows_positioned=3.00 K") {
            assert!(plan.contains("rows_overlaid=3,"), "{plan}");
            assert!(plan.contains("rows_patched=0"), "{plan}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never by position: {plan}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        common::sql(
            &q,
            "SELECT count(*), sum(a) FROM w WHERE id IN (5, 1500, 2999)"
        )
        .await,
        vec![vec!["3".to_string(), "0".to_string()]]
    );
    db.close().await;
}

async fn explain(q: &strata_query::QueryService, sql: &str) -> String {
    common::sql(q, &format!("EXPLAIN {sql}"))
        .await
        .into_iter()
        .map(|r| r.join(" | "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn parquet_counts(plan: &str) -> (usize, usize) {
    let at = plan.find("parquet=").expect("parquet counts") + "parquet=".len();
    let rest = &plan[at..];
    let read: usize = rest[..rest.find(' ').expect("space")]
        .parse()
        .expect("read");
    let p = rest.find("(pruned ").expect("pruned") + "(pruned ".len();
    let pruned: usize = rest[p..p + rest[p..].find(')').expect(")")]
        .parse()
        .expect("pruned");
    (read, pruned)
}
