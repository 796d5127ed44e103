//! The local-directory cache of the S3 levels: each Parquet file's tail (Bloom filters, page
//! index, footer) and fixed-size blocks of its data, with a byte budget.
//!
//! A cold point lookup into a file costs one ranged GET for the tail (kept on disk for the
//! life of the file) and one ranged GET covering the blocks of the pages it needs; a warm
//! one costs none.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use parking_lot::Mutex;
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Directory of the cache.
    pub dir: PathBuf,
    /// Block size of cached data ranges.
    pub block_bytes: u64,
    /// Most bytes of data blocks kept (tails are not counted: one per live file).
    pub budget_bytes: u64,
}

#[derive(Default)]
struct Blocks {
    present: HashMap<(String, u64), u64>,
    order: VecDeque<(String, u64)>,
    bytes: u64,
}

/// The cache. Shared by every shard of a process.
pub struct BlockCache {
    config: CacheConfig,
    blocks: Mutex<Blocks>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCache({})", self.config.dir.display())
    }
}

/// Distinguishes the temporary files of concurrent writes of one block.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn file_key(path: &Path) -> String {
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(path.as_ref().as_bytes())
    )
}

impl BlockCache {
    /// A cache in `config.dir` (created; left-over blocks of a previous process are
    /// dropped, tails are kept).
    pub fn new(config: CacheConfig) -> Result<Arc<Self>> {
        let blocks = config.dir.join("blocks");
        let _ = std::fs::remove_dir_all(&blocks);
        std::fs::create_dir_all(&blocks)
            .map_err(Error::io(format!("create {}", blocks.display())))?;
        std::fs::create_dir_all(config.dir.join("tails"))
            .map_err(Error::io(format!("create {}", config.dir.display())))?;
        Ok(Arc::new(Self {
            config,
            blocks: Mutex::new(Blocks::default()),
        }))
    }

    fn tail_path(&self, path: &Path) -> PathBuf {
        self.config.dir.join("tails").join(file_key(path))
    }

    fn block_path(&self, key: &str, block: u64) -> PathBuf {
        self.config
            .dir
            .join("blocks")
            .join(format!("{key}.{block}"))
    }

    /// The bytes `[tail_offset, size)` of a file: from disk, or one ranged GET.
    pub async fn tail(
        &self,
        store: &StoreRef,
        path: &Path,
        tail_offset: u64,
        size: u64,
    ) -> Result<Bytes> {
        let local = self.tail_path(path);
        if let Ok(data) = tokio::fs::read(&local).await
            && data.len() as u64 == size - tail_offset
        {
            return Ok(Bytes::from(data));
        }
        let data = store
            .get_range(path, tail_offset..size)
            .await
            .map_err(Error::store(format!("read tail of {path}")))?;
        let tmp = local.with_extension(format!(
            "{}.tmp",
            TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if tokio::fs::write(&tmp, &data).await.is_err()
            || tokio::fs::rename(&tmp, &local).await.is_err()
        {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        Ok(data)
    }

    /// Forgets a file (it was compacted away).
    pub fn evict_file(&self, path: &Path) {
        let _ = std::fs::remove_file(self.tail_path(path));
        let key = file_key(path);
        let mut b = self.blocks.lock();
        let gone: Vec<(String, u64)> = b
            .present
            .keys()
            .filter(|(k, _)| *k == key)
            .cloned()
            .collect();
        for g in gone {
            if let Some(n) = b.present.remove(&g) {
                b.bytes -= n;
                let _ = std::fs::remove_file(self.block_path(&g.0, g.1));
            }
        }
    }

    /// Reads byte ranges of a file through the block cache: the missing blocks are fetched
    /// with one ranged GET spanning them.
    pub async fn read_ranges(
        &self,
        store: &StoreRef,
        path: &Path,
        size: u64,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>> {
        let bs = self.config.block_bytes.max(4096);
        let key = file_key(path);
        let mut needed: Vec<u64> = ranges
            .iter()
            .filter(|r| r.end > r.start)
            .flat_map(|r| (r.start / bs)..=((r.end - 1) / bs))
            .collect();
        needed.sort_unstable();
        needed.dedup();
        // Per block: the bytes the ranges need of it (offset within the block, bytes). A
        // cached block is read from its file at just those offsets, all blocks in one
        // blocking call (the OS page cache usually answers: no whole-block copy).
        let mut want: HashMap<u64, (usize, usize)> = HashMap::new();
        for r in ranges.iter().filter(|r| r.end > r.start) {
            for b in (r.start / bs)..=((r.end - 1) / bs) {
                let lo = (r.start.max(b * bs) - b * bs) as usize;
                let hi = (r.end.min((b + 1) * bs) - b * bs) as usize;
                let w = want.entry(b).or_insert((lo, hi));
                *w = (w.0.min(lo), w.1.max(hi));
            }
        }
        let mut have: HashMap<u64, (usize, Bytes)> = HashMap::new();
        let mut missing = Vec::new();
        let mut reads = Vec::new();
        {
            let blocks = self.blocks.lock();
            for b in &needed {
                // A block file holds the whole block or it is not used: the last block of a
                // file is shorter, every other one is `bs` long.
                let expected = (size.saturating_sub(b * bs)).min(bs);
                if blocks.present.contains_key(&(key.clone(), *b)) {
                    let (lo, hi) = want[b];
                    reads.push((*b, self.block_path(&key, *b), expected, lo, hi));
                } else {
                    missing.push(*b);
                }
            }
        }
        if !reads.is_empty() {
            let got = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt;
                reads
                    .into_iter()
                    .map(|(b, path, expected, lo, hi)| {
                        // Block files are written whole (a temporary file renamed into
                        // place), so one that exists holds `expected` bytes; a short one
                        // (the disk lost it) fails the read and is fetched again. No
                        // `stat` per block: it cost a scan more than the read itself.
                        let read = || -> std::io::Result<Vec<u8>> {
                            if hi > expected as usize {
                                return Err(std::io::ErrorKind::UnexpectedEof.into());
                            }
                            let f = std::fs::File::open(&path)?;
                            let mut buf = vec![0u8; hi - lo];
                            f.read_exact_at(&mut buf, lo as u64)?;
                            Ok(buf)
                        };
                        (b, lo, read().ok())
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))?;
            for (b, lo, data) in got {
                match data {
                    Some(d) => {
                        have.insert(b, (lo, Bytes::from(d)));
                    }
                    None => missing.push(b),
                }
            }
            missing.sort_unstable();
        }
        if let (Some(first), Some(last)) = (missing.first(), missing.last()) {
            let span = (first * bs)..((last + 1) * bs).min(size);
            let data = store
                .get_opts(
                    path,
                    GetOptions {
                        range: Some(GetRange::Bounded(span.clone())),
                        ..Default::default()
                    },
                )
                .await
                .map_err(Error::store(format!("read {path}")))?
                .bytes()
                .await
                .map_err(Error::store(format!("read {path}")))?;
            if data.len() as u64 != span.end - span.start {
                return Err(Error::Corrupt(format!(
                    "parquet {path}: short read ({} of {} bytes); the object is truncated",
                    data.len(),
                    span.end - span.start
                )));
            }
            for b in missing {
                let lo = (b * bs - span.start) as usize;
                let hi = (((b + 1) * bs).min(size) - span.start) as usize;
                let block = data.slice(lo..hi);
                self.admit(&key, b, &block).await;
                have.insert(b, (0, block));
            }
        }
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            // Within one block: a slice of it, no copy.
            let b = r.start / bs;
            if r.end > r.start
                && (r.end - 1) / bs == b
                && let Some((at, block)) = have.get(&b)
                && ((r.end - b * bs) as usize) <= at + block.len()
            {
                let lo = (r.start - b * bs) as usize - at;
                out.push(block.slice(lo..lo + (r.end - r.start) as usize));
                continue;
            }
            let mut buf = Vec::with_capacity((r.end - r.start) as usize);
            let mut pos = r.start;
            while pos < r.end {
                let b = pos / bs;
                let (at, block) = have
                    .get(&b)
                    .ok_or_else(|| Error::Internal(format!("block {b} of {path} not read")))?;
                // `block` holds the block's bytes from offset `at`, which covers every
                // range's part of it.
                let block = &block[..];
                let lo = (pos - b * bs) as usize - at;
                let hi = ((r.end - b * bs) as usize - at).min(block.len());
                if lo >= hi {
                    return Err(Error::Corrupt(format!(
                        "parquet {path}: range {r:?} past the end of the object"
                    )));
                }
                buf.extend_from_slice(&block[lo..hi]);
                pos = b * bs + (at + hi) as u64;
            }
            out.push(Bytes::from(buf));
        }
        Ok(out)
    }

    async fn admit(&self, key: &str, block: u64, data: &Bytes) {
        if self.config.budget_bytes == 0 {
            return;
        }
        // Written under a name of its own and renamed into place, so a reader of the block
        // never sees a file another task is rewriting (two readers that both missed the
        // block admit it twice).
        let path = self.block_path(key, block);
        let tmp = path.with_extension(format!(
            "{block}.{}.tmp",
            TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if tokio::fs::write(&tmp, data).await.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
            return;
        }
        if tokio::fs::rename(&tmp, &path).await.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
            return;
        }
        let mut b = self.blocks.lock();
        let id = (key.to_string(), block);
        if b.present.insert(id.clone(), data.len() as u64).is_none() {
            b.bytes += data.len() as u64;
            b.order.push_back(id);
        }
        while b.bytes > self.config.budget_bytes {
            let Some(old) = b.order.pop_front() else {
                break;
            };
            if let Some(n) = b.present.remove(&old) {
                b.bytes -= n;
                let _ = std::fs::remove_file(self.block_path(&old.0, old.1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::PutPayload;
    use rand::{Rng, SeedableRng};

    /// Many readers of the same few blocks under a budget that keeps evicting them: every
    /// read returns the object's bytes (a block admitted twice at once used to be rewritten
    /// in place while another reader read it, which returned a short block).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_readers_see_whole_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 4096,
            budget_bytes: 3 * 4096,
        })
        .unwrap();
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("t/file.parquet");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let body: Vec<u8> = (0..40_000).map(|_| rng.random()).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let body = Arc::new(body);
        let size = body.len() as u64;
        let mut tasks = Vec::new();
        for t in 0..16u64 {
            let (cache, store, path, body) =
                (cache.clone(), store.clone(), path.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for _ in 0..300 {
                    let start = rng.random_range(0..size - 1);
                    let end = (start + rng.random_range(1..9000)).min(size);
                    let got = cache
                        .read_ranges(&store, &path, size, std::slice::from_ref(&(start..end)))
                        .await
                        .unwrap();
                    assert_eq!(&got[0][..], &body[start as usize..end as usize]);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let left = std::fs::read_dir(dir.path().join("blocks"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "tmp"))
            })
            .count();
        assert_eq!(left, 0, "temporary block files left behind");
    }

    /// A cached block file cut short on disk (a lost write) is not trusted: the read that
    /// needs its missing bytes fetches the block from the store again, and answers exactly.
    #[tokio::test]
    async fn a_block_cut_short_on_disk_is_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 4096,
            budget_bytes: 1 << 20,
        })
        .unwrap();
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("t/file.parquet");
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let size = body.len() as u64;
        let got = cache
            .read_ranges(&store, &path, size, std::slice::from_ref(&(0..size)))
            .await
            .unwrap();
        assert_eq!(&got[0][..], &body[..]);
        // Cut block 1 to half its length and block 2 to nothing.
        let key = file_key(&path);
        let b1 = cache.block_path(&key, 1);
        let b2 = cache.block_path(&key, 2);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&b1)
            .unwrap()
            .set_len(2048)
            .unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&b2)
            .unwrap()
            .set_len(0)
            .unwrap();
        let ranges = [4000..9000, 8192..12288, 4096..6000];
        let got = cache
            .read_ranges(&store, &path, size, &ranges)
            .await
            .unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(&g[..], &body[r.start as usize..r.end as usize], "{r:?}");
        }
    }

    /// Several ranges per request, sharing and straddling blocks, read from cached blocks
    /// at their offsets (each block holds only what the request's ranges need of it) and
    /// from the store: every range comes back exact.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranges_read_at_offsets_of_cached_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 4096,
            budget_bytes: 1 << 20,
        })
        .unwrap();
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("t/file.parquet");
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let body: Vec<u8> = (0..50_000).map(|_| rng.random()).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let size = body.len() as u64;
        for round in 0..400 {
            let n = rng.random_range(1..5);
            let ranges: Vec<Range<u64>> = (0..n)
                .map(|_| {
                    let start = rng.random_range(0..size - 1);
                    start..(start + rng.random_range(1..10_000)).min(size)
                })
                .collect();
            let got = cache
                .read_ranges(&store, &path, size, &ranges)
                .await
                .unwrap();
            for (r, g) in ranges.iter().zip(&got) {
                assert_eq!(
                    &g[..],
                    &body[r.start as usize..r.end as usize],
                    "round {round}, {r:?} of {ranges:?}"
                );
            }
        }
    }
}
