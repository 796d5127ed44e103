//! After the deep level (or without one): the keys past it, spliced from the overlay's
//! columns where nothing else is left, or resolved row by row.

use super::*;

impl ViewBatches {
    /// Whether all that is left after a deep level read by position is the overlay's
    /// entries (no carried versions, no memtable versions): then its keys past the level's
    /// last row, new keys appended since (an append-only load's fresh rows), are copied
    /// from its columns instead of resolved row by row.
    pub(super) fn overlay_tail_only(&mut self) -> Result<bool> {
        if !self.carry.is_empty() || self.peek_upper()?.is_some() {
            return Ok(false);
        }
        Ok(self.overlay.as_ref().is_some_and(|o| !o.partial))
    }

    /// The next run of the overlay's keys past the deep level (see
    /// [`Self::overlay_tail_only`]): whole rows copied in key order; a delete there has
    /// nothing beneath it. Hands over to the (empty) row path when they are done.
    pub(super) fn next_overlay_tail(&mut self) -> Result<Option<RecordBatch>> {
        let overlay = self
            .overlay
            .clone()
            .expect("an overlay tail comes with an overlay");
        while self.ov_pos < self.ov_end {
            let to = (self.ov_pos + self.batch_rows).min(self.ov_end);
            let mut ukeys = Vec::with_capacity(to - self.ov_pos);
            for i in self.ov_pos..to {
                match overlay.entries[i].kind {
                    EntryKind::Put => {
                        ukeys.push((0, false, From::Overlay(overlay.rows[i] as usize)))
                    }
                    EntryKind::Delete => {}
                    EntryKind::Partial => {
                        return Err(Error::Internal(
                            "a partial row in an overlay read by position".into(),
                        ));
                    }
                }
            }
            self.ov_pos = to;
            if ukeys.is_empty() {
                continue;
            }
            let base = self.empty_base(&overlay);
            let batch = self.assemble(base, 0, &ukeys, Vec::new(), &[])?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
        self.ov_tail = false;
        self.start_tail()?;
        Ok(None)
    }

    /// Past the deep level: the keys above it still to come are spliced from the overlay
    /// where there is one (and nothing is carried over from the level), else resolved row
    /// by row.
    pub(super) fn after_deep(&mut self) -> Result<()> {
        if self.carry.is_empty() && self.overlay.is_some() && !self.spliced_tail {
            self.deep = None;
            self.spliced_tail = true;
            return Ok(());
        }
        self.start_tail()
    }

    /// The next run of keys above the deep level past its end (see [`Self::after_deep`]):
    /// the overlay's whole rows copied from its columns, a delete dropped, and only keys
    /// with memtable versions or a partial overlay entry resolved row by row. Hands over to
    /// the (then empty) row path when they are done.
    pub(super) fn next_spliced_tail(&mut self) -> Result<Option<RecordBatch>> {
        let end = self.end.clone();
        loop {
            let (upper, ov, _) = self.upper_until(end.as_deref(), false, self.batch_rows)?;
            if upper.is_empty() && ov.is_empty() {
                self.spliced_tail = false;
                self.start_tail()?;
                return Ok(None);
            }
            let overlay = self
                .overlay
                .clone()
                .expect("a spliced tail comes with an overlay");
            let (ov_entries, ov_rows) = (&overlay.entries[ov.clone()], &overlay.rows[ov]);
            // No deep rows: every key is new.
            let Sourced {
                ukeys,
                resolved_keys,
                versions,
                ..
            } = sourced(&upper, ov_entries, ov_rows, self.read_seq, |_| (0, false));
            let patched = if versions.is_empty() {
                Vec::new()
            } else {
                self.resolve(versions)?
            };
            let base = self.empty_base(&overlay);
            let batch = self.assemble(base, 0, &ukeys, patched, &resolved_keys)?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
    }

    /// No deep rows: an empty base of the types the overlay's columns are spliced as.
    pub(super) fn empty_base(&self, overlay: &Overlay) -> Vec<ArrayRef> {
        (0..self.projection.len())
            .map(|c| {
                let t = match &self.ov_columns[c] {
                    Some(a) => a.data_type().clone(),
                    None => overlay.batch.column(self.projection[c]).data_type().clone(),
                };
                arrow::array::new_empty_array(&t)
            })
            .collect()
    }

    pub(super) fn start_tail(&mut self) -> Result<()> {
        self.deep = None;
        let mut carry = std::mem::take(&mut self.carry);
        carry.sort_by(newest_first);
        let rest: Box<dyn EntryIter> = Box::new(Upper {
            peek: self.upper_peek.take(),
            inner: std::mem::replace(&mut self.upper, Box::new(VecIter(Vec::new().into_iter()))),
        });
        let overlay = self.overlay_entries(self.ov_pos..self.ov_end);
        self.ov_pos = self.ov_end;
        let merged = MergeIter::with_parts(
            vec![
                Box::new(VecIter(carry.into_iter())),
                rest,
                Box::new(VecIter(overlay.into_iter())),
            ],
            self.table.codec.clone(),
        );
        self.tail = Some(RowIter::new(
            Box::new(merged),
            &self.table.codec,
            self.read_seq,
            self.end.clone(),
        ));
        Ok(())
    }

    pub(super) fn next_tail(&mut self) -> Result<Option<RecordBatch>> {
        let Some(tail) = self.tail.as_mut() else {
            return Ok(None);
        };
        let mut rows = Vec::with_capacity(self.batch_rows.min(1024));
        while rows.len() < self.batch_rows {
            match tail.next_row()? {
                Some(r) => rows.push(r),
                None => break,
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        self.paths.merged += rows.len() as u64;
        self.rows_batch(&rows).map(Some)
    }
}
