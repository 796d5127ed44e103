//! The local-directory cache of the S3 levels: each Parquet file's tail (Bloom filters, page
//! index, footer) and fixed-size blocks of its data, in files under one byte budget.
//!
//! A cold point lookup into a file costs one ranged GET for the tail and one ranged GET per
//! run of the blocks of the pages it needs (issued together); a warm one costs none.
//!
//! Which files stay is `quick_cache`'s policy (CLOCK-Pro-like: entries read again stay, a
//! one-off scan passes through), over an index of (file, block) and file tails weighted by
//! their bytes; an entry the policy evicts has its file deleted once the index's lock is
//! released. Blocks of a previous process are dropped at start; its tails are kept and
//! counted. Files compacted away are never read again and age out.
//!
//! A local-directory bucket is read in place: its first GET hands over the object's file
//! (`GetResultPayload::File`), and from then on a read's ranges are one request that the
//! store answers by reading its own file (one hop to its blocking pool), nothing is copied into the cache's directory and nothing is counted as a hit or a
//! miss. Copying a file of the same disk into a second file bought no round trip and cost a
//! file creation, a write and twice the space per block: 64 readers over a columnar level
//! fresh from compaction spent about a fifth of the cold start creating and writing block
//! files, and fetched five times the level's bytes (one GET spans every block between the
//! first and the last missing one).

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResultPayload, ObjectStoreExt};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Directory of the cache.
    pub dir: PathBuf,
    /// Block size of cached data ranges.
    pub block_bytes: u64,
    /// Most bytes of data blocks and tails kept.
    pub budget_bytes: u64,
}

/// A cached file: a block of a Parquet file, or its tail. Files are named by a hash of the
/// object's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Block(u64, u64),
    Tail(u64),
}

/// Entries weigh their bytes (at least 1: an empty tail still holds a file).
#[derive(Clone)]
struct Bytesize;

impl quick_cache::Weighter<Slot, u64> for Bytesize {
    fn weight(&self, _: &Slot, len: &u64) -> u64 {
        (*len).max(1)
    }
}

/// Collects evicted entries; `BlockCache::admitted` deletes their files after the index's
/// lock is released (any other request deletes them in `end_request`).
#[derive(Clone)]
struct DeleteEvicted {
    dir: Arc<PathBuf>,
}

impl quick_cache::Lifecycle<Slot, u64> for DeleteEvicted {
    type RequestState = Vec<Slot>;

    fn begin_request(&self) -> Self::RequestState {
        Vec::new()
    }

    fn on_evict(&self, state: &mut Self::RequestState, key: Slot, _: u64) {
        state.push(key);
    }

    fn end_request(&self, state: Self::RequestState) {
        for slot in state {
            let _ = std::fs::remove_file(slot_path(&self.dir, slot));
        }
    }
}

fn slot_path(dir: &std::path::Path, slot: Slot) -> PathBuf {
    match slot {
        Slot::Block(file, block) => dir.join("blocks").join(format!("{file:016x}.{block}")),
        Slot::Tail(file) => dir.join("tails").join(format!("{file:016x}")),
    }
}

type Index =
    quick_cache::sync::Cache<Slot, u64, Bytesize, quick_cache::DefaultHashBuilder, DeleteEvicted>;

/// The cache. Shared by every shard of a process.
pub struct BlockCache {
    config: CacheConfig,
    index: Index,
    hits: AtomicU64,
    misses: AtomicU64,
    /// The store handed over its own files (a local-directory bucket): ranges are read
    /// from them in place, never cached.
    in_place: AtomicBool,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCache({})", self.config.dir.display())
    }
}

/// Distinguishes the temporary files of concurrent writes of one block.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn file_key(path: &Path) -> u64 {
    xxhash_rust::xxh3::xxh3_64(path.as_ref().as_bytes())
}

/// Writes `data` to `path` through a temporary file renamed into place, so a reader never
/// sees a file another task is rewriting. False if it could not be written.
async fn write_whole(path: &std::path::Path, data: &Bytes) -> bool {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    if crate::localfs::write(tmp.clone(), data.clone())
        .await
        .is_err()
        || crate::localfs::rename(&tmp, path).await.is_err()
    {
        let _ = crate::localfs::remove_file(&tmp).await;
        return false;
    }
    true
}

impl BlockCache {
    /// A cache in `config.dir` (created; left-over blocks of a previous process are
    /// dropped, its tails are kept and counted in the budget).
    pub fn new(config: CacheConfig) -> Result<Arc<Self>> {
        let blocks = config.dir.join("blocks");
        let _ = std::fs::remove_dir_all(&blocks);
        std::fs::create_dir_all(&blocks)
            .map_err(Error::io(format!("create {}", blocks.display())))?;
        let tails = config.dir.join("tails");
        std::fs::create_dir_all(&tails)
            .map_err(Error::io(format!("create {}", config.dir.display())))?;
        // Sized for blocks of the configured size filling the budget.
        let items = (config.budget_bytes / config.block_bytes.max(4096)).clamp(64, 1 << 22);
        let index = Index::with(
            items as usize,
            config.budget_bytes.max(1),
            Bytesize,
            Default::default(),
            DeleteEvicted {
                dir: Arc::new(config.dir.clone()),
            },
        );
        let cache = Arc::new(Self {
            config,
            index,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            in_place: AtomicBool::new(false),
        });
        // The tails a previous process left: counted, so they leave under the budget.
        for e in std::fs::read_dir(&tails)
            .map_err(Error::io(format!("list {}", tails.display())))?
            .flatten()
        {
            let name = e.file_name();
            let name = name.to_string_lossy();
            match (u64::from_str_radix(&name, 16), e.metadata()) {
                (Ok(file), Ok(m)) if name.len() == 16 && m.is_file() => {
                    cache.admitted(Slot::Tail(file), m.len());
                }
                _ => {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(cache)
    }

    /// What the cache holds: (bytes, files (blocks and tails), reads answered from it,
    /// reads that fetched from the store). Its bytes stay within `budget_bytes`.
    pub fn stats(&self) -> (u64, usize, u64, u64) {
        (
            self.index.weight(),
            self.index.len(),
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    fn path_of(&self, slot: Slot) -> PathBuf {
        slot_path(&self.config.dir, slot)
    }

    /// Records a file written whole at `slot`'s path (a budget of 0 keeps nothing), and
    /// deletes the files of the entries the index evicted for it. The index reports an
    /// entry it replaced as evicted too: when two readers admitted the same block, the
    /// second's file took the first's name, so that one is not deleted.
    fn admitted(&self, slot: Slot, len: u64) {
        if self.config.budget_bytes == 0 {
            let _ = std::fs::remove_file(self.path_of(slot));
            return;
        }
        for gone in self.index.insert_with_lifecycle(slot, len) {
            if gone != slot {
                let _ = std::fs::remove_file(self.path_of(gone));
            }
        }
    }

    /// The bytes `[tail_offset, size)` of a file: from disk, or one ranged GET.
    pub async fn tail(
        &self,
        store: &StoreRef,
        path: &Path,
        tail_offset: u64,
        size: u64,
    ) -> Result<Bytes> {
        if self.in_place.load(Ordering::Relaxed) {
            return store
                .get_range(path, tail_offset..size)
                .await
                .map_err(Error::store(format!("read tail of {path}")));
        }
        let slot = Slot::Tail(file_key(path));
        let local = self.path_of(slot);
        if self.index.get(&slot).is_some()
            && let Ok(data) = crate::localfs::read(&local).await
            && data.len() as u64 == size - tail_offset
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Bytes::from(data));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let data = store
            .get_range(path, tail_offset..size)
            .await
            .map_err(Error::store(format!("read tail of {path}")))?;
        if self.config.budget_bytes > 0 && write_whole(&local, &data).await {
            self.admitted(slot, data.len() as u64);
        }
        Ok(data)
    }

    /// Reads byte ranges of a file through the block cache: the missing blocks are fetched
    /// with one ranged GET per run of them (a gap of one block is taken in), all at once.
    pub async fn read_ranges(
        &self,
        store: &StoreRef,
        path: &Path,
        size: u64,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>> {
        if self.in_place.load(Ordering::Relaxed) {
            // One request for every range: the local-directory store opens the file and
            // reads the ranges in one call on its blocking pool (a GET handing over the
            // file, then a read of it, took two hops per page a lookup missed).
            if let Some(r) = ranges.iter().find(|r| r.end > size || r.start > r.end) {
                return Err(Error::Corrupt(format!(
                    "parquet {path}: range {r:?} past the end of the object ({size} bytes)"
                )));
            }
            return store
                .get_ranges(path, ranges)
                .await
                .map_err(Error::store(format!("read {path}")));
        }
        let bs = self.config.block_bytes.max(4096);
        let file = file_key(path);
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
        for b in &needed {
            // A block file holds the whole block or it is not used: the last block of a
            // file is shorter, every other one is `bs` long.
            let expected = (size.saturating_sub(b * bs)).min(bs);
            let slot = Slot::Block(file, *b);
            if self.index.get(&slot).is_some() {
                let (lo, hi) = want[b];
                reads.push((*b, self.path_of(slot), expected, lo, hi));
            } else {
                missing.push(*b);
            }
        }
        if !reads.is_empty() {
            let got = strata_common::exec::blocking(move || {
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
        self.hits
            .fetch_add((needed.len() - missing.len()) as u64, Ordering::Relaxed);
        self.misses
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        if !missing.is_empty() {
            // Runs of missing blocks, one ranged GET each, all at once. A run takes in a
            // gap of one cached block (read again rather than split the GET); a wider gap
            // is not fetched. One GET from the first missing block to the last fetched
            // every block between a key column's pages and a value column's: five times a
            // level's bytes for point reads across it.
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for &b in &missing {
                match runs.last_mut() {
                    Some((_, last)) if b <= *last + 2 => *last = b,
                    _ => runs.push((b, b)),
                }
            }
            let gets = runs.iter().map(|&(first, last)| {
                let span = (first * bs)..((last + 1) * bs).min(size);
                async move {
                    let got = store
                        .get_opts(
                            path,
                            GetOptions {
                                range: Some(GetRange::Bounded(span.clone())),
                                ..Default::default()
                            },
                        )
                        .await
                        .map_err(Error::store(format!("read {path}")))?;
                    let data = match got.payload {
                        GetResultPayload::File(file, _) => return Ok(Fetched::File(file)),
                        GetResultPayload::Stream(_) => got
                            .bytes()
                            .await
                            .map_err(Error::store(format!("read {path}")))?,
                    };
                    if data.len() as u64 != span.end - span.start {
                        return Err(Error::Corrupt(format!(
                            "parquet {path}: short read ({} of {} bytes); the object is truncated",
                            data.len(),
                            span.end - span.start
                        )));
                    }
                    Ok(Fetched::Bytes(span, data))
                }
            });
            let mut fetched = Vec::with_capacity(runs.len());
            for got in futures::future::try_join_all(gets).await? {
                match got {
                    Fetched::File(file) => {
                        // A local-directory bucket: its file is read in place, now and
                        // from now on.
                        self.in_place.store(true, Ordering::Relaxed);
                        return read_in_place(file, path, ranges).await;
                    }
                    Fetched::Bytes(span, data) => fetched.push((span, data)),
                }
            }
            for b in missing {
                let (span, data) = fetched
                    .iter()
                    .find(|(span, _)| span.contains(&(b * bs)))
                    .ok_or_else(|| Error::Internal(format!("block {b} of {path} not fetched")))?;
                let lo = (b * bs - span.start) as usize;
                let hi = (((b + 1) * bs).min(size) - span.start) as usize;
                let block = data.slice(lo..hi);
                self.admit(Slot::Block(file, b), &block).await;
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

    /// Keeps a block fetched from the store (two readers that both missed it admit it
    /// twice; each writes a file of its own and renames it into place).
    async fn admit(&self, slot: Slot, data: &Bytes) {
        if self.config.budget_bytes == 0 {
            return;
        }
        if write_whole(&self.path_of(slot), data).await {
            self.admitted(slot, data.len() as u64);
        }
    }
}

/// What one ranged GET of missing blocks brought: the bytes of its span, or the object's
/// own file (a local-directory bucket).
enum Fetched {
    Bytes(Range<u64>, Bytes),
    File(std::fs::File),
}

/// The byte ranges of an object from the file a local-directory bucket handed over, each
/// read exactly (one blocking call for all of them). A range past the file's end is an
/// error naming the object.
async fn read_in_place(
    file: std::fs::File,
    path: &Path,
    ranges: &[Range<u64>],
) -> Result<Vec<Bytes>> {
    let ranges = ranges.to_vec();
    let name = path.to_string();
    strata_common::exec::blocking(move || {
        use std::os::unix::fs::FileExt;
        ranges
            .iter()
            .map(|r| {
                let mut buf = vec![0u8; r.end.saturating_sub(r.start) as usize];
                file.read_exact_at(&mut buf, r.start).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        Error::Corrupt(format!(
                            "parquet {name}: range {r:?} past the end of the object"
                        ))
                    } else {
                        Error::Io {
                            context: format!("read {name}"),
                            source: e,
                        }
                    }
                })?;
                Ok(Bytes::from(buf))
            })
            .collect()
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
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
        let b1 = cache.path_of(Slot::Block(key, 1));
        let b2 = cache.path_of(Slot::Block(key, 2));
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

    fn bytes_in(dir: &std::path::Path) -> (u64, usize) {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .fold((0, 0), |(b, n), l| (b + l, n + 1))
    }

    /// Blocks read through a small budget: the files on disk and the bytes the cache
    /// reports stay within it, and blocks read again and again stay cached through a
    /// one-off pass over many others (the index's policy; first in, first out evicted
    /// them).
    #[tokio::test]
    async fn the_budget_bounds_the_files_and_hot_blocks_outlast_a_pass() {
        let dir = tempfile::tempdir().unwrap();
        let bs = 4096u64;
        let budget = 64 * bs;
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: bs,
            budget_bytes: budget,
        })
        .unwrap();
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("t/file.parquet");
        let body: Vec<u8> = (0..1000 * bs as u32).map(|i| (i % 253) as u8).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let size = body.len() as u64;
        let read = |b: u64| {
            let (cache, store, path, body) = (&cache, &store, &path, &body);
            async move {
                let r = b * bs + 10..b * bs + 100;
                let got = cache
                    .read_ranges(store, path, size, std::slice::from_ref(&r))
                    .await
                    .unwrap();
                assert_eq!(&got[0][..], &body[r.start as usize..r.end as usize]);
            }
        };
        for _ in 0..3 {
            for b in 0..4 {
                read(b).await;
            }
        }
        assert_eq!(
            cache.stats().2,
            8,
            "the second and third reads of the hot blocks hit"
        );
        for b in 100..900 {
            read(b).await;
        }
        let (bytes, files, _, misses) = cache.stats();
        assert!(
            bytes <= budget,
            "{bytes} bytes held against a budget of {budget}"
        );
        let (on_disk, n) = bytes_in(&dir.path().join("blocks"));
        assert!(on_disk <= budget, "{on_disk} bytes on disk");
        assert_eq!(n, files, "every block file is in the index, and only those");
        for b in 0..4 {
            read(b).await;
        }
        assert_eq!(
            cache.stats().3,
            misses,
            "a one-off pass evicted the hot blocks"
        );
    }

    /// Many readers missing the same blocks at once each admit them: every block the index
    /// holds keeps its file (the index reports a replaced entry as evicted, which deleted
    /// the file the second admission had just put in place, so each later read missed,
    /// fetched and admitted again), and a second pass reads everything from disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_admits_of_one_block_keep_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 64 << 10,
            budget_bytes: 1 << 30,
        })
        .unwrap();
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let size = 4u64 << 20;
        for f in 0..4 {
            let path = Path::from(format!("t/{f}.parquet"));
            store
                .put(&path, PutPayload::from(vec![f as u8; size as usize]))
                .await
                .unwrap();
        }
        let pass = |cache: Arc<BlockCache>, store: StoreRef| async move {
            let mut tasks = Vec::new();
            for t in 0..32u64 {
                let (cache, store) = (cache.clone(), store.clone());
                tasks.push(tokio::spawn(async move {
                    for i in 0..100u64 {
                        let f = (t + i) % 4;
                        let path = Path::from(format!("t/{f}.parquet"));
                        let s = (i * 7919 * 4096) % (size - 100);
                        let got = cache
                            .read_ranges(&store, &path, size, std::slice::from_ref(&(s..s + 100)))
                            .await
                            .unwrap();
                        assert!(got[0].iter().all(|b| *b == f as u8));
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        };
        pass(cache.clone(), store.clone()).await;
        let (_, files, _, misses) = cache.stats();
        assert_eq!(bytes_in(&dir.path().join("blocks")).1, files);
        pass(cache.clone(), store.clone()).await;
        assert_eq!(
            cache.stats().3,
            misses,
            "a block the index holds lost its file"
        );
    }

    /// Tails a previous process left are counted at start, so they leave under the budget
    /// as new ones come; its temporary files are removed.
    #[tokio::test]
    async fn tails_left_by_a_previous_process_stay_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let tails = dir.path().join("tails");
        std::fs::create_dir_all(&tails).unwrap();
        for i in 0..40u64 {
            std::fs::write(tails.join(format!("{i:016x}")), vec![7u8; 4000]).unwrap();
        }
        std::fs::write(tails.join("00000000000000aa.3.tmp"), b"partial").unwrap();
        let budget = 40 * 4000;
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 4096,
            budget_bytes: budget,
        })
        .unwrap();
        let (bytes, files, _, _) = cache.stats();
        assert!(files > 0 && bytes <= budget, "{files} tails, {bytes} bytes");
        assert_eq!(
            bytes_in(&tails),
            (bytes, files),
            "the index counts what is on disk"
        );
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let body: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
        for f in 0..30 {
            let path = Path::from(format!("t/{f}.parquet"));
            store
                .put(&path, PutPayload::from(body.clone()))
                .await
                .unwrap();
            let tail = cache.tail(&store, &path, 1000, 6000).await.unwrap();
            assert_eq!(&tail[..], &body[1000..]);
        }
        let (bytes, files, _, _) = cache.stats();
        assert!(bytes <= budget, "{bytes} bytes held");
        assert_eq!(
            bytes_in(&tails),
            (bytes, files),
            "the index counts what is on disk"
        );
    }

    /// A tail read again comes from the local disk; with a budget of 0 nothing is kept.
    #[tokio::test]
    async fn a_tail_read_again_is_answered_from_disk() {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("t/file.parquet");
        let body: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        for (budget, hits) in [(1 << 20, 1), (0, 0)] {
            let dir = tempfile::tempdir().unwrap();
            let cache = BlockCache::new(CacheConfig {
                dir: dir.path().to_path_buf(),
                block_bytes: 4096,
                budget_bytes: budget,
            })
            .unwrap();
            for _ in 0..2 {
                let tail = cache.tail(&store, &path, 1000, 6000).await.unwrap();
                assert_eq!(&tail[..], &body[1000..]);
            }
            assert_eq!(cache.stats().2, hits, "budget {budget}");
            assert_eq!(bytes_in(&dir.path().join("tails")).1, hits as usize);
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
        for round in 0..400 {
            read_random_ranges(&cache, &store, &path, &body, &mut rng, round).await;
        }
    }

    /// One round of random reads: one to four ranges of `body` (stored at `path`), each
    /// up to 10,000 bytes, read through `cache` and checked byte for byte.
    async fn read_random_ranges(
        cache: &BlockCache,
        store: &StoreRef,
        path: &Path,
        body: &[u8],
        rng: &mut rand::rngs::StdRng,
        round: usize,
    ) {
        let size = body.len() as u64;
        let n = rng.random_range(1..5);
        let ranges: Vec<Range<u64>> = (0..n)
            .map(|_| {
                let start = rng.random_range(0..size - 1);
                start..(start + rng.random_range(1..10_000)).min(size)
            })
            .collect();
        let got = cache.read_ranges(store, path, size, &ranges).await.unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(
                &g[..],
                &body[r.start as usize..r.end as usize],
                "round {round}, {r:?} of {ranges:?}"
            );
        }
    }

    /// A local-directory bucket (the standard decorators over it, as a `Db` builds them)
    /// is read in place: every range and tail read comes back exact, no file is written
    /// into the cache's directory, nothing is counted as a hit or a miss, and a range past
    /// the object's end is an error naming it.
    #[tokio::test]
    async fn a_local_directory_bucket_is_read_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().join("cache"),
            block_bytes: 4096,
            budget_bytes: 1 << 20,
        })
        .unwrap();
        let (store, _) = strata_objstore::build(
            &strata_objstore::ObjectStoreConfig::local(dir.path().join("bucket")),
            &strata_objstore::ObjectStoreMetrics::default(),
        )
        .await
        .unwrap();
        let path = Path::from("t/file.parquet");
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let body: Vec<u8> = (0..50_000).map(|_| rng.random()).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let size = body.len() as u64;
        let mut after_first = (0, 0, 0, 0);
        for round in 0..200 {
            read_random_ranges(&cache, &store, &path, &body, &mut rng, round).await;
            let tail = cache.tail(&store, &path, size - 100, size).await.unwrap();
            assert_eq!(&tail[..], &body[body.len() - 100..]);
            if round == 0 {
                after_first = cache.stats();
            }
        }
        for sub in ["blocks", "tails"] {
            assert_eq!(
                bytes_in(&dir.path().join("cache").join(sub)),
                (0, 0),
                "{sub}"
            );
        }
        // Only the first read, before the store handed over a file, counted (its misses).
        assert_eq!(cache.stats(), after_first);
        assert_eq!(after_first.0, 0);
        assert_eq!(after_first.1, 0);
        let past_the_end = vec![size - 10..size + 10, 0..10];
        let err = cache
            .read_ranges(&store, &path, size, &past_the_end)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("t/file.parquet") && err.to_string().contains("past the end"),
            "{err}"
        );
    }

    /// Missing blocks far apart are fetched by a GET each, not by one GET spanning every
    /// block between them; a gap of one block is taken into its run.
    #[tokio::test]
    async fn missing_blocks_far_apart_are_fetched_without_the_gap() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(CacheConfig {
            dir: dir.path().to_path_buf(),
            block_bytes: 4096,
            budget_bytes: 1 << 20,
        })
        .unwrap();
        let metrics = strata_objstore::ObjectStoreMetrics::default();
        let store: StoreRef = Arc::new(strata_objstore::InstrumentedStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            metrics.clone(),
        ));
        let path = Path::from("t/file.parquet");
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .unwrap();
        let size = body.len() as u64;
        let gets = || (metrics.requests("get", "t"), metrics.bytes("get", "t"));
        let before = gets();
        // Blocks 0 and 40: two GETs of a block each.
        let ranges = [10..20, 40 * 4096 + 5..40 * 4096 + 50];
        let got = cache
            .read_ranges(&store, &path, size, &ranges)
            .await
            .unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(&g[..], &body[r.start as usize..r.end as usize]);
        }
        assert_eq!((gets().0 - before.0, gets().1 - before.1), (2, 2 * 4096));
        // Blocks 10 and 12: one GET of three blocks.
        let before = gets();
        let ranges = [10 * 4096..10 * 4096 + 1, 12 * 4096 + 7..12 * 4096 + 9];
        let got = cache
            .read_ranges(&store, &path, size, &ranges)
            .await
            .unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(&g[..], &body[r.start as usize..r.end as usize]);
        }
        assert_eq!((gets().0 - before.0, gets().1 - before.1), (1, 3 * 4096));
        // All four again: from the cache.
        let before = gets();
        cache
            .read_ranges(&store, &path, size, &[10..20, 12 * 4096 + 7..12 * 4096 + 9])
            .await
            .unwrap();
        assert_eq!(gets(), before);
    }
}
