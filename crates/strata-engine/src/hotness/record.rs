//! An access record of the tracker: a key, the size of its value, a decayed score and the
//! auto-tuning's stability counter, merged by exponential smoothing; and its encoding in a
//! run file.

use crate::error::{Error, Result};

/// One access record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The key.
    pub key: Vec<u8>,
    /// Size of the key's value (its latest access).
    pub value_len: u32,
    /// Tick of the latest access.
    pub tick: u64,
    /// Score as of `tick`.
    pub score: f64,
    /// Stability counter (auto-tuning) as of `epoch`.
    pub counter: f64,
    /// Seen again after its first access (auto-tuning's `t`).
    pub repeated: bool,
    /// Counter epoch (accessed bytes / R) of `counter`.
    pub epoch: u64,
}

impl Record {
    /// The HotRAP size: key plus value bytes.
    pub fn hot_size(&self) -> u64 {
        self.key.len() as u64 + u64::from(self.value_len)
    }

    /// The record's own size on disk.
    pub fn physical_size(&self) -> u64 {
        self.key.len() as u64 + 4 + 4 + 8 + 8 + 8 + 1 + 8
    }

    /// The score decayed to `tick`.
    pub fn score_at(&self, tick: u64, alpha: f64) -> f64 {
        self.score * alpha.powi(tick.saturating_sub(self.tick).min(i32::MAX as u64) as i32)
    }

    pub(super) fn counter_at(&self, epoch: u64) -> f64 {
        (self.counter - epoch.saturating_sub(self.epoch) as f64).max(0.0)
    }

    /// Merges an older record of the same key into this newer one (§3.2's score merge;
    /// Algorithm 1's counter: a key seen again gains Δc up to c_max and becomes `repeated`).
    pub fn absorb(&mut self, older: &Record, alpha: f64) {
        let (newer_tick, older_tick) = (self.tick.max(older.tick), self.tick.min(older.tick));
        let (new_s, old_s) = if self.tick >= older.tick {
            (self.score, older.score)
        } else {
            (older.score, self.score)
        };
        let gap = (newer_tick - older_tick).min(i32::MAX as u64) as i32;
        self.score = alpha.powi(gap) * old_s + new_s;
        self.tick = newer_tick;
        let epoch = self.epoch.max(older.epoch);
        self.counter = (self.counter_at(epoch) + older.counter_at(epoch)).min(super::C_MAX);
        self.epoch = epoch;
        self.repeated = true;
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value_len.to_le_bytes());
        out.extend_from_slice(&self.tick.to_le_bytes());
        out.extend_from_slice(&self.score.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.push(u8::from(self.repeated));
        out.extend_from_slice(&self.epoch.to_le_bytes());
    }

    pub(super) fn decode(buf: &[u8], at: &mut usize) -> Result<Record> {
        let corrupt = || Error::Corrupt("hotness tracker run truncated".into());
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = buf.get(*at..*at + n).ok_or_else(corrupt)?;
            *at += n;
            Ok(s)
        };
        let u32_ = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let u64_ = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let klen = u32_(take(4)?) as usize;
        let key = take(klen)?.to_vec();
        let value_len = u32_(take(4)?);
        let tick = u64_(take(8)?);
        let score = f64::from_bits(u64_(take(8)?));
        let counter = f64::from_bits(u64_(take(8)?));
        let repeated = take(1)?[0] != 0;
        let epoch = u64_(take(8)?);
        Ok(Record {
            key,
            value_len,
            tick,
            score,
            counter,
            repeated,
            epoch,
        })
    }
}
