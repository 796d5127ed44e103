//! The overlays of a view: the upper tiers (row levels, shallower columnar levels, then the
//! memtables) folded once into Arrow columns over the deep run a scan reads by columns,
//! with their keys placed among the run's rows, built in the background by the first wide
//! scan of a file set and cached in the process (see [`crate::read::overlay`]). The view's
//! scans (`ShardView::batches`) take them from here.

use std::sync::Arc;

use super::*;

impl ShardView {
    /// A fold of the versions of `mems` newer than `from` and through `seq` over an
    /// overlay (`under`), with its keys placed in the deep run `run` when `under`'s are;
    /// None when it would hold more than `max` bytes. Blocking: run it on a blocking
    /// thread; the view's pins keep its files meanwhile.
    fn memtable_folder(
        &self,
        run: &DeepRun,
        mems: Vec<Arc<Memtable>>,
        handle: &tokio::runtime::Handle,
    ) -> impl FnOnce(
        Arc<crate::read::overlay::Overlay>,
        u64,
        u64,
        u64,
    ) -> Result<Option<crate::read::overlay::Overlay>>
    + Send
    + 'static {
        let (table, holds) = (self.table.clone(), self.holds.clone());
        let (store, paths, s3) = (self.store.clone(), self.paths.clone(), self.reads.clone());
        let first = run.groups.first().cloned().unwrap_or_default();
        let h = handle.clone();
        move |under, from, seq, max| {
            let _holds = holds;
            let sources = mems
                .into_iter()
                .map(|m| {
                    Box::new(MemtableIter::newer_than(m, &[], None, from)) as Box<dyn EntryIter>
                })
                .collect();
            let started = std::time::Instant::now();
            let Some(folded) = crate::read::overlay::Overlay::fold(&table, sources, seq, max)?
            else {
                return Ok(None);
            };
            let Some(combined) = under.combine(&table, &folded, max)? else {
                return Ok(None);
            };
            tracing::debug!(
                keys = folded.keys(),
                from,
                seq,
                ms = started.elapsed().as_millis() as u64,
                "scan overlay: memtables folded over the upper tiers"
            );
            if under.positions.is_none() {
                return Ok(Some(combined));
            }
            let files = BucketFiles {
                store: &store,
                paths: &paths,
                cache: &s3.cache,
                metas: &s3.metas,
            };
            let deep_files: Vec<_> = first.iter().map(|f| files.parquet_source(f)).collect();
            Ok(Some(combined.positioned(&table, &deep_files, &h)))
        }
    }

    /// What identifies the overlay of the immutable upper tiers above the deep run `run`
    /// (see [`crate::read::overlay`]): the shard, the table's schema, every file folded and the
    /// run's first group's files (the overlay's keys are placed among them). None when
    /// the view reads older than the newest version folded. With nothing to fold the
    /// overlay is empty: the memtables are then folded over it alone
    /// ([`Self::folded_memtables`]).
    pub(super) fn overlay_key(&self, run: &DeepRun) -> Option<String> {
        use std::fmt::Write;
        let m = &self.state.manifest.value;
        let deep = run.level;
        let ssts: Vec<&SstInfo> = self
            .state
            .levels
            .iter()
            .flatten()
            .map(|h| &h.info)
            .collect();
        let files: Vec<&strata_manifest::ParquetFileInfo> = m.s3_levels
            [..deep.min(m.s3_levels.len())]
            .iter()
            .flat_map(|l| l.groups.iter().flat_map(|g| g.files.iter()))
            .filter(|f| !run.holds(&f.name))
            .collect();
        let newest = ssts
            .iter()
            .map(|i| i.seq_max)
            .chain(files.iter().map(|f| f.seq_max))
            .max()
            .unwrap_or(0);
        if newest > self.read_seq {
            return None;
        }
        // The overlay reads every group of the upper S3 levels and takes a whole-row put in
        // them as whole: only right when each level's groups hold the same versions (a
        // version whose other groups were compacted deeper is only part of a row here).
        let whole = m.s3_levels[..deep.min(m.s3_levels.len())].iter().all(|l| {
            l.groups
                .iter()
                .all(|g| run_signature(g) == run_signature(&l.groups[0]))
        });
        if !whole {
            return None;
        }
        let schema = xxhash_rust::xxh3::xxh3_64(format!("{:?}", self.table.read_schema).as_bytes());
        // The row-oriented levels are named by the newest sequence number they hold, not
        // by their files: what a fold of them yields at its newest version changes only
        // when a flush brings newer writes (memtables flush oldest first, so every write
        // up to that number is then in them or deeper) or a cross-tier job moves rows into
        // the columnar levels (whose files are named below). A compaction within the row
        // levels merges versions without changing the newest one of any key, so the
        // overlay built before it still holds (it was rebuilt from scratch after every L0
        // compaction); records promoted into L0 are copies of versions already beneath.
        let mut key = format!("{}|{deep}|{schema:016x}|", self.paths.dir());
        match ssts.iter().map(|i| i.seq_max).max() {
            Some(seq) => {
                let _ = write!(key, "rows<={seq}");
            }
            None => key.push_str("no rows"),
        }
        key.push('|');
        for f in files {
            let _ = write!(key, "{},", f.name);
        }
        // And the run's first group, where the overlay's keys are placed (see
        // `crate::read::scan::Positions`).
        key.push('|');
        for f in run.groups.first().into_iter().flatten() {
            let _ = write!(key, "{},", f.name);
        }
        Some(key)
    }

    /// Whether `[start, end)` spans enough of the deep run (a sixteenth of its rows), or of
    /// the versions above it in the row-oriented levels and memtables (a sixteenth, as
    /// estimated by [`upper_inside`]), for a scan of it to be worth building an overlay
    /// for. The second is what a scan of the newest keys needs: they lie past the deep
    /// run's last key, in L0 or the memtables, and without an overlay every scan of them
    /// merges and decodes them row by row (about 20x a scan of as many deep rows).
    pub(super) fn wide(&self, run: &DeepRun, start: &[u8], end: Option<&[u8]>) -> bool {
        let Some(files) = run.groups.first() else {
            return false;
        };
        let total: u64 = files.iter().map(|f| f.rows).sum();
        let inside: u64 = files
            .iter()
            .filter(|f| {
                f.key_max.as_slice() >= start && end.is_none_or(|e| f.key_min.as_slice() < e)
            })
            .map(|f| f.rows)
            .sum();
        if inside.saturating_mul(16) >= total {
            return true;
        }
        let mems: Vec<_> = self
            .state
            .memtables()
            .filter_map(|m| Some((m.len() as u64, m.key_span()?)))
            .collect();
        let files = self.state.levels.iter().flatten().map(|h| {
            let i = &h.info;
            (i.entries, i.key_min.as_slice(), i.key_max.as_slice())
        });
        let mems = mems
            .iter()
            .map(|(n, (lo, hi))| (*n, lo.as_ref(), hi.as_ref()));
        let (upper_total, upper_in) = upper_inside(files.chain(mems), start, end);
        upper_total > 0 && upper_in * 16.0 >= upper_total as f64
    }

    /// What the overlay cache holds under `key`, when ready. Otherwise, when `build`,
    /// starts `make` (given the most one overlay may hold) on a blocking thread; `wait`:
    /// runs it here, or waits for the scan running it.
    fn cached_overlay(
        &self,
        key: String,
        handle: &tokio::runtime::Handle,
        build: bool,
        wait: bool,
        make: impl FnOnce(u64) -> Result<Option<crate::read::overlay::Overlay>> + Send + 'static,
    ) -> Option<Arc<crate::read::overlay::Overlay>> {
        use crate::read::overlay::Lookup;
        let cache = self.reads.overlays.clone();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match cache.lookup(&key, build) {
                Lookup::Ready(o) => return Some(o),
                Lookup::Skip => return None,
                Lookup::Building if wait && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Lookup::Building => return None,
                Lookup::Build => {
                    let job = move || {
                        let max = cache.max_overlay_bytes();
                        // A panic must not leave the slot "being built" forever.
                        let built =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make(max)))
                                .unwrap_or_else(|_| {
                                    Err(Error::Internal("building a scan overlay panicked".into()))
                                });
                        cache.finish(&key, built)
                    };
                    if wait {
                        return job();
                    }
                    strata_common::exec::detach(handle, move || drop(job()));
                    return None;
                }
            }
        }
    }

    /// The overlay of the immutable upper tiers above the deep run `run`, cached under `key`
    /// ([`Self::overlay_key`]), when one is ready; otherwise see [`Self::cached_overlay`].
    pub(super) fn overlay(
        &self,
        key: String,
        run: &DeepRun,
        handle: &tokio::runtime::Handle,
        build: bool,
        wait: bool,
    ) -> Option<Arc<crate::read::overlay::Overlay>> {
        let (table, state, store, paths, s3, holds) = (
            self.table.clone(),
            self.state.clone(),
            self.store.clone(),
            self.paths.clone(),
            self.reads.clone(),
            self.holds.clone(),
        );
        let h = handle.clone();
        let run = run.clone();
        self.cached_overlay(key, handle, build, wait, move |max| {
            // The view's pins keep its files while the build reads them, even if the scan
            // that started it is done.
            let _holds = holds;
            let files = BucketFiles {
                store: &store,
                paths: &paths,
                cache: &s3.cache,
                metas: &s3.metas,
            };
            crate::read::overlay::Overlay::build(&table, &state, &files, &run, max, &h)
        })
    }

    /// `base` (the overlay cached under `base_key`) with this view's memtables folded over
    /// it, when a ready one matches them exactly: every memtable version is visible at the
    /// view's sequence number, and the cache key names each memtable and its newest
    /// sequence number (the writer applies writes in sequence order, so that fixes its
    /// content). Otherwise, when `wait`, builds it as [`Self::cached_overlay`] does; scans
    /// fold the memtables through a sequence number instead ([`Self::folded_memtables`]).
    pub(super) fn memtable_overlay(
        &self,
        base_key: &str,
        run: &DeepRun,
        base: &Arc<crate::read::overlay::Overlay>,
        handle: &tokio::runtime::Handle,
        wait: bool,
    ) -> Option<Arc<crate::read::overlay::Overlay>> {
        use std::fmt::Write;
        let mems = self.nonempty_memtables();
        if mems.is_empty() {
            return None;
        }
        let mut key = format!("{base_key}|memtables|");
        let mut max_seq = 0;
        for m in &mems {
            let seq = m.seq_max();
            if seq > self.read_seq {
                return None;
            }
            max_seq = max_seq.max(seq);
            let _ = write!(key, "{}:{seq},", m.identity());
        }
        // Built here only when asked to wait (`warm_overlay`); scans use one if ready.
        let base = base.clone();
        let fold = self.memtable_folder(run, mems, handle);
        self.cached_overlay(key, handle, wait, wait, move |max| {
            fold(base, 0, max_seq, max)
        })
    }

    /// `base` (the overlay cached under `base_key`) with this view's memtables folded over
    /// it through some sequence number at most the view's, when one is ready: under
    /// writes the memtables change between any two scans, so the exact fold of
    /// [`Self::memtable_overlay`] is never reused, and each scan would resolve every
    /// memtable row row by row. The scan then takes only the memtable versions newer than
    /// the fold on the row path. The first wide scan (`start_build`) of a file set with
    /// memtables starts the fold in the background; a scan that finds the memtables grown
    /// by more than what was folded (and by at least `scan_memtable_refold_bytes`) starts
    /// folding just those newer versions over it, and meanwhile uses the older fold.
    pub(super) fn folded_memtables(
        &self,
        base_key: &str,
        run: &DeepRun,
        base: &Arc<crate::read::overlay::Overlay>,
        handle: &tokio::runtime::Handle,
        start_build: bool,
    ) -> Option<Arc<crate::read::overlay::Overlay>> {
        use crate::read::overlay::{Lookup, MemtablesFolded, Overlay};
        let mems = self.nonempty_memtables();
        if mems.is_empty() {
            return None;
        }
        let cache = self.reads.overlays.clone();
        cache.refold_bytes(0)?;
        // Before the sequence number to fold through is chosen: scans of a fold through
        // it then take the newer versions from the memtables' logs.
        for m in &mems {
            m.log_newer();
        }
        let key = format!("{base_key}|memtables-through");
        let ids: Vec<String> = mems.iter().map(|m| m.identity()).collect();
        let bytes: u64 = mems.iter().map(|m| m.size_bytes() as u64).sum();
        // Every version through this one is in `mems` (the writer applies a batch before it
        // publishes its sequence number) and visible to this view.
        let seq = mems
            .iter()
            .map(|m| m.seq_max())
            .max()
            .unwrap_or(0)
            .min(self.read_seq);
        let usable = |o: &Overlay| {
            o.memtables
                .as_ref()
                .is_some_and(|f| f.seq <= self.read_seq && f.ids.iter().all(|i| ids.contains(i)))
        };
        let fold = self.memtable_folder(run, mems, handle);
        let folded_ids = ids.clone();
        // Folds the versions newer than `from` over `under`, and records what it holds.
        let build = move |under: Arc<Overlay>, from: u64, max: u64| -> Result<Option<Overlay>> {
            Ok(fold(under, from, seq, max)?.map(|mut o| {
                o.memtables = Some(MemtablesFolded {
                    seq,
                    ids: folded_ids,
                    bytes,
                });
                o
            }))
        };
        let spawn =
            |key: String,
             cache: Arc<crate::read::overlay::OverlayCache>,
             job: Box<dyn FnOnce(u64) -> Result<Option<Overlay>> + Send>| {
                strata_common::exec::detach(handle, move || {
                    let max = cache.max_overlay_bytes();
                    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(max)))
                        .unwrap_or_else(|_| {
                            Err(Error::Internal("building a scan overlay panicked".into()))
                        });
                    cache.finish(&key, built);
                });
            };
        match cache.lookup(&key, start_build) {
            Lookup::Ready(o) if usable(&o) => {
                let folded = o.memtables.as_ref().map_or(0, |f| f.bytes);
                let grown = bytes.saturating_sub(folded);
                if cache.refold_bytes(folded).is_some_and(|r| grown > r)
                    && seq > o.memtables.as_ref().map_or(0, |f| f.seq)
                    && cache.start_refresh(&key)
                {
                    let (under, from) = (o.clone(), o.memtables.as_ref().map_or(0, |f| f.seq));
                    spawn(key, cache, Box::new(move |max| build(under, from, max)));
                }
                Some(o)
            }
            // Folded from memtables this view no longer has (or newer than it reads).
            Lookup::Ready(_) => None,
            Lookup::Build => {
                let under = base.clone();
                spawn(key, cache, Box::new(move |max| build(under, 0, max)));
                None
            }
            Lookup::Building | Lookup::Skip => None,
        }
    }

    /// The deep run's rows as `overlay`'s positions count them, when they hold for the run
    /// read through the groups `groups`: they were computed on its first group (whose files
    /// the overlay's cache key names), and every group read must hold the same versions as
    /// that one.
    pub(super) fn positions_hold(
        &self,
        overlay: &crate::read::overlay::Overlay,
        run: &DeepRun,
        groups: &[usize],
    ) -> Option<u64> {
        let p = overlay.positions.as_ref()?;
        let first = run.signature(0)?;
        groups
            .iter()
            .all(|g| run.signature(*g).is_some_and(|s| s == first))
            .then_some(p.rows)
    }

    /// Builds (or waits for) the scan overlay of this view's immutable upper tiers (and of
    /// its memtables over them, when every memtable version is visible), as the
    /// first wide scan of a file set does in the background (see [`crate::read::overlay`]); true
    /// when scans of this view now use one. Blocking: call it on a blocking thread.
    pub fn warm_overlay(&self, handle: &tokio::runtime::Handle) -> bool {
        let Some((run, key)) = self
            .deep_run(&[])
            .and_then(|run| Some((run.clone(), self.overlay_key(&run)?)))
        else {
            return false;
        };
        let Some(base) = self.overlay(key.clone(), &run, handle, true, true) else {
            return false;
        };
        // And the memtables over it, when they are all visible.
        self.memtable_overlay(&key, &run, &base, handle, true);
        true
    }
}

/// Of the versions in `spans` (count, smallest and largest key of each file or memtable),
/// how many there are and how many `[start, end)` holds, estimated: a span's versions taken
/// as spread evenly over its key range, keys compared as numbers by their first eight
/// bytes (exact for a `BIGINT` key, a fair guess for others).
pub(super) fn upper_inside<'a>(
    spans: impl Iterator<Item = (u64, &'a [u8], &'a [u8])>,
    start: &[u8],
    end: Option<&[u8]>,
) -> (u64, f64) {
    fn at(key: &[u8]) -> u64 {
        let mut b = [0u8; 8];
        let n = key.len().min(8);
        b[..n].copy_from_slice(&key[..n]);
        u64::from_be_bytes(b)
    }
    let (mut total, mut inside) = (0u64, 0.0f64);
    for (n, lo, hi) in spans {
        total += n;
        // Outside the range altogether.
        if hi < start || end.is_some_and(|e| lo >= e) {
            continue;
        }
        // Wholly inside.
        if lo >= start && end.is_none_or(|e| hi < e) {
            inside += n as f64;
            continue;
        }
        let (a, b) = (at(lo), at(hi));
        if b <= a {
            inside += n as f64;
            continue;
        }
        // Differences, not positions, as floats: near 2^63 (a `BIGINT` key's sign bit
        // flipped) a float cannot tell keys a thousand apart.
        let from = at(start).max(a);
        let to = end.map_or(b, |e| at(e).min(b));
        let part = to.saturating_sub(from) as f64 / (b - a) as f64;
        inside += n as f64 * part.clamp(0.0, 1.0);
    }
    (total, inside)
}

#[cfg(test)]
mod tests {
    use super::upper_inside;

    fn k(i: u64) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn versions_inside_a_range_are_estimated_from_key_spans() {
        let (a, b, c, d, e, f) = (k(0), k(1000), k(2000), k(2999), k(5000), k(6000));
        // A span of 1,000 keys wholly inside, one half inside, one wholly outside.
        let spans = || {
            [
                (1000, a.as_slice(), b.as_slice()),
                (500, c.as_slice(), d.as_slice()),
                (7, e.as_slice(), f.as_slice()),
            ]
            .into_iter()
        };
        let (total, inside) = upper_inside(spans(), &k(0), Some(&k(2500)));
        assert_eq!(total, 1507);
        assert!((inside - 1250.0).abs() < 2.0, "{inside}");
        // Unbounded above: everything from key 2,500 on.
        let (_, inside) = upper_inside(spans(), &k(2500), None);
        assert!((inside - 257.0).abs() < 2.0, "{inside}");
        // A single-key span counts whole when the range holds its key, else not at all.
        let one = k(42);
        let (_, inside) = upper_inside(
            [(3, one.as_slice(), one.as_slice())].into_iter(),
            &k(40),
            Some(&k(50)),
        );
        assert_eq!(inside, 3.0);
        let (_, inside) = upper_inside(
            [(3, one.as_slice(), one.as_slice())].into_iter(),
            &k(43),
            Some(&k(50)),
        );
        assert_eq!(inside, 0.0);
        // Keys as a `BIGINT` key encodes them (sign bit flipped): near 2^63.
        let big = |i: u64| (i ^ (1 << 63)).to_be_bytes().to_vec();
        let (lo, hi) = (big(2000), big(2599));
        let (_, inside) = upper_inside(
            [(600, lo.as_slice(), hi.as_slice())].into_iter(),
            &big(2100),
            Some(&big(2120)),
        );
        assert!((inside - 20.0).abs() < 1.0, "{inside}");
        // Keys shorter than eight bytes compare by their bytes as well.
        let (_, inside) = upper_inside(
            [(100, b"a".as_slice(), b"z".as_slice())].into_iter(),
            b"a",
            Some(b"n"),
        );
        assert!(inside > 40.0 && inside < 60.0, "{inside}");
    }
}
