//! The local log: where a shard's locally durable WAL segments (`Durability::Local`) wait for
//! their upload, on the node's disk.
//!
//! A locally durable write is acknowledged once its segment is on the local disk; a file per
//! segment would cost a new file and two journal commits (the file's, then its directory's)
//! per write. The log instead appends each segment to a file filled with zeros when it was
//! made, so an append overwrites blocks the file already owns and `fdatasync` flushes data
//! only, as a database's preallocated log does. A file whose segments are all uploaded is
//! reused for later ones.
//!
//! ```text
//! file: record* (then whatever an earlier use of the file left, or zeros)
//! record: magic "SLWL" | generation u64 | wal id u64 | length u32 | segment | crc32c u32
//! ```
//!
//! The crc32c covers everything before it in the record. Each use of a file has a
//! generation, higher than any before it in this log; reading a file back stops at the first
//! record that is torn, not a record, or of another generation than the file's first record,
//! so what an earlier use left past the end is never read as new. Only std file I/O: the
//! caller runs it off the async runtime, or in place when [`LocalLog::append_is_brief`]. This module owns the log's files and nothing else;
//! it calls the segment format's checksum only.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"SLWL";
/// magic, generation, wal id, length.
const HEADER: usize = 4 + 8 + 8 + 4;
const TRAILER: usize = 4;
/// The suffix of a log file's name (`<n>.walog`).
pub const LOG_SUFFIX: &str = ".walog";
/// The suffix of a segment file an older binary wrote for each locally durable segment
/// (`<20-digit id>.wal`); read back on open, never written.
pub const SEGMENT_FILE_SUFFIX: &str = ".wal";
/// The size of a log file: segments are small group commits, so a file holds many; a larger
/// segment gets a file of its own size.
pub const LOG_FILE_BYTES: u64 = 4 << 20;

/// One file of the log.
#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    file: File,
    len: u64,
    generation: u64,
    /// Where the next record goes.
    pos: u64,
    /// The highest WAL id appended in this use (0: none yet).
    last_id: u64,
}

/// A shard's local log, in its local directory. Files are made at the first append, not
/// before: a shard that never takes a locally durable write keeps no log.
#[derive(Debug)]
pub struct LocalLog {
    dir: PathBuf,
    file_bytes: u64,
    /// Files in use, oldest first; the last takes appends.
    used: Vec<LogFile>,
    /// Files whose segments are all uploaded, ready for another use.
    spare: Vec<LogFile>,
    next_generation: u64,
    next_file: u64,
    /// How long the last append took (its sync, mostly).
    last_append: std::time::Duration,
}

/// An append that overwrites a file the log already has and whose last sync took less than
/// this is brief: the caller may run it in place on its thread rather than hand it off
/// (`strata_common::exec::blocking_brief`). A disk slower than this (a network volume) gains
/// little from saving the hand-off.
pub const BRIEF_APPEND: std::time::Duration = std::time::Duration::from_millis(1);

impl LocalLog {
    /// A log in `dir` (which holds no log files: a shard's open uploads and removes them),
    /// with files of `file_bytes`.
    pub fn new(dir: impl Into<PathBuf>, file_bytes: u64) -> Self {
        Self {
            dir: dir.into(),
            file_bytes: file_bytes.max(4096),
            used: Vec::new(),
            spare: Vec::new(),
            next_generation: 1,
            next_file: 1,
            last_append: std::time::Duration::ZERO,
        }
    }

    /// Whether appending `len` bytes is brief ([`BRIEF_APPEND`]): it fits the file taking
    /// appends or a spare one (making a file writes all of it), and the last append was
    /// quick.
    pub fn append_is_brief(&self, len: usize) -> bool {
        let need = (HEADER + len + TRAILER) as u64;
        let fits = self.used.last().is_some_and(|f| f.pos + need <= f.len)
            || self.spare.iter().any(|f| f.len >= need);
        fits && self.last_append < BRIEF_APPEND
    }

    /// Appends the segment `data` with id `wal_id` and returns once it is on the disk
    /// (`fdatasync`). Ids never decrease; appends with the same id are the parts of one
    /// segment, in order (locally durable group commits gathered before their upload), read
    /// back together by [`recover`].
    pub fn append(&mut self, wal_id: u64, data: &[u8]) -> std::io::Result<()> {
        let start = std::time::Instant::now();
        let need = (HEADER + data.len() + TRAILER) as u64;
        let room = self.used.last().is_some_and(|f| f.pos + need <= f.len);
        if !room {
            self.next_use(need)?;
        }
        let f = self.used.last_mut().expect("a file in use");
        let record = encode(f.generation, wal_id, data);
        f.file.write_all_at(&record, f.pos)?;
        let synced = f.file.sync_data();
        self.last_append = start.elapsed();
        synced?;
        f.pos += need;
        f.last_id = wal_id;
        Ok(())
    }

    /// Every segment up to `wal_id` is in the bucket: files holding nothing later become
    /// spares (or are removed, when made larger than the usual size for one segment).
    pub fn uploaded(&mut self, wal_id: u64) {
        // The file taking appends stays in use even when all of it is uploaded.
        while self.used.len() > 1 && self.used[0].last_id <= wal_id {
            let f = self.used.remove(0);
            if f.len == self.file_bytes && self.spare.len() < 2 {
                self.spare.push(f);
            } else {
                let _ = std::fs::remove_file(&f.path);
            }
        }
    }

    /// How many files the log has on disk (in use and spare).
    pub fn files(&self) -> usize {
        self.used.len() + self.spare.len()
    }

    /// A file for a record of `need` bytes: a spare if one is large enough, else a new one.
    fn next_use(&mut self, need: u64) -> std::io::Result<()> {
        let generation = self.next_generation;
        self.next_generation += 1;
        let mut f = match self.spare.iter().position(|f| f.len >= need) {
            Some(i) => self.spare.remove(i),
            None => self.make(need.max(self.file_bytes))?,
        };
        f.generation = generation;
        f.pos = 0;
        f.last_id = 0;
        self.used.push(f);
        Ok(())
    }

    /// A new file of `len` zero bytes, written and synced with its directory entry, so later
    /// appends change no metadata.
    fn make(&mut self, len: u64) -> std::io::Result<LogFile> {
        std::fs::create_dir_all(&self.dir)?;
        let path = loop {
            let p = self.dir.join(format!("{}{LOG_SUFFIX}", self.next_file));
            self.next_file += 1;
            if !p.exists() {
                break p;
            }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_all()?;
        File::open(&self.dir)?.sync_all()?;
        Ok(LogFile {
            path,
            file,
            len,
            generation: 0,
            pos: 0,
            last_id: 0,
        })
    }
}

fn encode(generation: u64, wal_id: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len() + TRAILER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&wal_id.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The records of one log file's current use, in order: its generation and (wal id,
/// segment part) pairs.
fn read_records(bytes: &[u8]) -> (u64, Vec<(u64, Vec<u8>)>) {
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut generation = None;
    while at + HEADER + TRAILER <= bytes.len() {
        let h = &bytes[at..at + HEADER];
        if &h[..4] != MAGIC {
            break;
        }
        let g = u64::from_le_bytes(h[4..12].try_into().expect("8 bytes"));
        let id = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes")) as usize;
        let end = at + HEADER + len;
        if end + TRAILER > bytes.len() || *generation.get_or_insert(g) != g {
            break;
        }
        let crc = u32::from_le_bytes(bytes[end..end + TRAILER].try_into().expect("4 bytes"));
        if crc32c::crc32c(&bytes[at..end]) != crc {
            break;
        }
        out.push((id, bytes[at + HEADER..end].to_vec()));
        at = end + TRAILER;
    }
    (generation.unwrap_or(0), out)
}

/// Every locally durable segment in `dir`, in id order, each as its parts in the order they
/// were appended (one part unless group commits were gathered under its id, possibly across
/// files): the log's files and the segment files of older binaries. A segment both places
/// hold is returned once, from its segment file. A torn or partly overwritten record ends
/// its file's reading (it was never acknowledged).
pub fn recover(dir: &Path) -> std::io::Result<Vec<(u64, Vec<Vec<u8>>)>> {
    // id -> (generation, position in its file, part)
    let mut logged: std::collections::BTreeMap<u64, Vec<(u64, usize, Vec<u8>)>> =
        Default::default();
    let mut whole = std::collections::BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(LOG_SUFFIX) {
            let (generation, records) = read_records(&std::fs::read(e.path())?);
            for (at, (id, data)) in records.into_iter().enumerate() {
                logged.entry(id).or_default().push((generation, at, data));
            }
        } else if let Some(id) = name
            .strip_suffix(SEGMENT_FILE_SUFFIX)
            .and_then(|n| n.parse::<u64>().ok())
        {
            whole.insert(id, vec![std::fs::read(e.path())?]);
        }
    }
    for (id, mut parts) in logged {
        // A file's generations rise with each use, so (generation, position) is append order.
        parts.sort_by_key(|p| (p.0, p.1));
        whole
            .entry(id)
            .or_insert_with(|| parts.into_iter().map(|p| p.2).collect());
    }
    Ok(whole.into_iter().collect())
}

/// Whether `name` is one of the files [`recover`] reads (a log file or an older binary's
/// segment file).
pub fn is_local_wal_file(name: &str) -> bool {
    name.ends_with(LOG_SUFFIX)
        || name
            .strip_suffix(SEGMENT_FILE_SUFFIX)
            .is_some_and(|n| n.parse::<u64>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: u64, n: usize) -> Vec<u8> {
        (0..n).map(|i| (id as usize * 31 + i) as u8).collect()
    }

    #[test]
    fn appended_segments_read_back_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 4096);
        for id in 1..=5 {
            log.append(id, &seg(id, 100)).unwrap();
        }
        let back = recover(dir.path()).unwrap();
        assert_eq!(
            back,
            (1..=5)
                .map(|id| (id, vec![seg(id, 100)]))
                .collect::<Vec<_>>()
        );
        assert_eq!(log.files(), 1);
    }

    #[test]
    fn an_append_is_brief_only_into_a_file_the_log_has() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 4096);
        assert!(!log.append_is_brief(100), "the first append makes a file");
        log.append(1, &seg(1, 100)).unwrap();
        let quick = log.last_append < BRIEF_APPEND;
        assert_eq!(log.append_is_brief(100), quick);
        assert!(
            !log.append_is_brief(8192),
            "larger than any file: a new one"
        );
        // Once uploaded, a full file becomes a spare a later use can take.
        log.append(2, &seg(2, 3000)).unwrap();
        log.append(3, &seg(3, 3000)).unwrap();
        log.uploaded(2);
        assert_eq!(log.files(), 2);
        assert_eq!(log.append_is_brief(3000), log.last_append < BRIEF_APPEND);
    }

    #[test]
    fn parts_of_one_segment_read_back_together_in_order_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 4096);
        log.append(1, &seg(1, 100)).unwrap();
        // Id 2 gathers four 1,000-byte parts; the fourth rolls into a second file.
        let parts: Vec<Vec<u8>> = (0..4).map(|i| seg(2 + i * 7, 1000)).collect();
        for p in &parts {
            log.append(2, p).unwrap();
        }
        log.append(3, &seg(3, 100)).unwrap();
        assert_eq!(log.files(), 2);
        assert_eq!(
            recover(dir.path()).unwrap(),
            vec![
                (1, vec![seg(1, 100)]),
                (2, parts.clone()),
                (3, vec![seg(3, 100)])
            ]
        );
        // Once 2 is uploaded the first file (all of it at or below 2) becomes a spare; id 4's
        // third part rolls into it. The log then holds only 2's last part (the bucket's copy
        // is whole: a reopen recognises it by its writer epoch), and 4's parts in order
        // across the two files.
        log.uploaded(2);
        let fours: Vec<Vec<u8>> = (0..3).map(|i| seg(40 + i, 1000)).collect();
        for p in &fours {
            log.append(4, p).unwrap();
        }
        assert_eq!(log.files(), 2, "the spare was reused");
        assert_eq!(
            recover(dir.path()).unwrap(),
            vec![
                (2, vec![parts[3].clone()]),
                (3, vec![seg(3, 100)]),
                (4, fours)
            ]
        );
    }

    #[test]
    fn files_are_reused_once_uploaded_and_old_records_are_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        // Three 1,000-byte records fill a 4 KiB file.
        let mut log = LocalLog::new(dir.path(), 4096);
        for id in 1..=3 {
            log.append(id, &seg(id, 1000)).unwrap();
        }
        log.append(4, &seg(4, 1000)).unwrap();
        assert_eq!(log.files(), 2);
        log.uploaded(3);
        // The first file is a spare now; the next roll takes it instead of making one.
        for id in 5..=7 {
            log.append(id, &seg(id, 1000)).unwrap();
        }
        assert_eq!(log.files(), 2);
        // The reused file holds 7 at its start and 1..3's bytes after: only 7 is its use's.
        let back: Vec<u64> = recover(dir.path()).unwrap().iter().map(|r| r.0).collect();
        assert_eq!(back, vec![4, 5, 6, 7]);
        log.uploaded(7);
        assert_eq!(log.files(), 2, "the file taking appends stays");
    }

    #[test]
    fn a_segment_larger_than_a_file_gets_its_own_and_it_is_removed_after_upload() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 4096);
        log.append(1, &seg(1, 100)).unwrap();
        log.append(2, &seg(2, 10_000)).unwrap();
        log.append(3, &seg(3, 100)).unwrap();
        assert_eq!(recover(dir.path()).unwrap().len(), 3);
        log.uploaded(3);
        // The big file is removed; the small one is kept as a spare; the third takes appends.
        assert_eq!(log.files(), 2);
        let sizes: Vec<u64> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .collect();
        assert!(sizes.iter().all(|s| *s == 4096), "{sizes:?}");
    }

    #[test]
    fn a_torn_record_ends_the_file_and_older_segment_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 4096);
        for id in 1..=3 {
            log.append(id, &seg(id, 50)).unwrap();
        }
        // Tear record 3: flip a byte of its segment.
        let path = dir.path().join(format!("1{LOG_SUFFIX}"));
        let mut bytes = std::fs::read(&path).unwrap();
        let third = 2 * (HEADER + 50 + TRAILER) + HEADER + 10;
        bytes[third] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        // An older binary's segment file.
        std::fs::write(dir.path().join(format!("{:020}.wal", 9)), seg(9, 20)).unwrap();
        std::fs::write(dir.path().join("12.sst"), b"not a wal").unwrap();
        let back: Vec<u64> = recover(dir.path()).unwrap().iter().map(|r| r.0).collect();
        assert_eq!(back, vec![1, 2, 9]);
        assert!(is_local_wal_file("1.walog") && is_local_wal_file("00000000000000000009.wal"));
        assert!(!is_local_wal_file("12.sst") && !is_local_wal_file("x.wal"));
    }

    #[test]
    fn appends_leave_the_file_size_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LocalLog::new(dir.path(), 8192);
        for id in 1..=20 {
            log.append(id, &seg(id, 300)).unwrap();
        }
        for e in std::fs::read_dir(dir.path()).unwrap() {
            assert_eq!(e.unwrap().metadata().unwrap().len(), 8192);
        }
        assert!(
            recover(Path::new("/nonexistent/strata-log"))
                .unwrap()
                .is_empty()
        );
    }
}
