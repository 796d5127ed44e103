//! The deep level, chunk by chunk: each chunk of the deepest columnar level passes
//! through, is patched with the upper versions in its key range, or is merged row by row
//! (see the parent module); a level read by position takes the overlay entries placed
//! before each chunk's last row.

use super::*;

impl ViewBatches {
    pub(super) fn next_unbounded(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.tail.is_some() {
                return self.next_tail();
            }
            if self.spliced_tail {
                match self.next_spliced_tail()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            if self.ov_tail {
                match self.next_overlay_tail()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            if self.next_row.is_some() {
                match self.next_positioned()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            let Some(deep) = self.deep.as_mut() else {
                self.after_deep()?;
                continue;
            };
            let fresh = deep.pushback.is_empty();
            let Some(mut chunk) = deep.next_chunk(self.batch_rows)? else {
                self.after_deep()?;
                continue;
            };
            if fresh && deep.meta.is_none() {
                self.paths.unversioned += chunk.rows() as u64;
            }
            if let Some(d) = &self.decided {
                let skip = lower_bound(chunk.keys(), d, true);
                if skip == chunk.rows() {
                    continue;
                }
                if skip > 0 {
                    chunk = chunk.slice(skip, chunk.rows() - skip);
                }
            }
            // The carried key is resolved with its versions at the start of this chunk, if
            // any, and alone, so that the rest of the chunk need not be merged row by row
            // for its sake.
            if let Some(c) = self.carry.first() {
                let keys = chunk.keys();
                let end = lower_bound(keys, &c.key, true);
                if end < chunk.rows() {
                    let mut versions = std::mem::take(&mut self.carry);
                    if let Some(deep) = self.deep.as_mut() {
                        deep.pushback
                            .push_front(chunk.slice(end, chunk.rows() - end));
                        deep.versions(&self.table, &chunk, 0..end, &mut versions)?;
                    }
                    if let Some(b) = self.merged(versions)? {
                        return Ok(Some(b));
                    }
                    continue;
                }
            } else if let Some(deep) = self.deep.as_mut() {
                // The last key's versions may go on in the next chunk: they wait for it,
                // and the rest of this chunk can be taken column-wise.
                while let Some(cut) = deep.open_tail(&chunk, self.read_seq)
                    && cut > 0
                {
                    deep.pushback
                        .push_front(chunk.slice(cut, chunk.rows() - cut));
                    chunk = chunk.slice(0, cut);
                }
            }
            let first = chunk.keys().key(0);
            // Upper keys before the chunk are not in the deep level: resolve them alone.
            if self.carry.is_empty() && self.next_upper_key()?.is_some_and(|k| k < first) {
                if let Some(deep) = self.deep.as_mut() {
                    deep.pushback.push_front(chunk);
                }
                let (mut versions, ov, _) =
                    self.upper_until(Some(&first), false, self.batch_rows)?;
                versions.extend(self.overlay_entries(ov));
                if let Some(b) = self.merged(versions)? {
                    return Ok(Some(b));
                }
                continue;
            }
            let mut n = chunk.rows();
            let mut last = chunk.keys().key(n - 1);
            let (upper, ov, cut) = self.upper_until(Some(&last), true, self.batch_rows)?;
            if let Some(u) = cut {
                // Many upper keys in the chunk's range: stop the chunk after them.
                let split = lower_bound(chunk.keys(), &u, true);
                if split < n {
                    let rest = chunk.slice(split, n - split);
                    if let Some(deep) = self.deep.as_mut() {
                        deep.pushback.push_front(rest);
                    }
                    if split == 0 {
                        // Only with a carry: it and these upper keys precede the chunk.
                        let mut versions = std::mem::take(&mut self.carry);
                        versions.extend(upper);
                        versions.extend(self.overlay_entries(ov));
                        if let Some(b) = self.merged(versions)? {
                            return Ok(Some(b));
                        }
                        continue;
                    }
                    chunk = chunk.slice(0, split);
                    n = split;
                    last = chunk.keys().key(n - 1);
                }
            }
            let deep = self.deep.as_ref().expect("deep level");
            let mut upper = upper;
            let clean = self.carry.is_empty()
                && (deep.clean(&chunk, self.read_seq)
                    || match deep.visible(&self.table, &chunk, self.read_seq)? {
                        Some((visible, partial)) => {
                            self.paths.superseded += (n - visible.rows()) as u64;
                            chunk = visible;
                            n = chunk.rows();
                            if !partial.is_empty() {
                                // Resolved with the upper versions of their keys, which
                                // are newer: one list in (key, sequence-descending) order.
                                upper.extend(partial);
                                upper.sort_by(newest_first);
                            }
                            true
                        }
                        None => false,
                    });
            if clean {
                // Every version of the keys up to `last` is decided, older ones in the
                // next chunk included.
                self.decided = Some(last);
                if n == 0 {
                    // Only deletes and versions the read does not see: the upper versions
                    // in the range are all there is.
                    let mut versions = upper;
                    versions.extend(self.overlay_entries(ov));
                    if let Some(b) = self.merged(versions)? {
                        return Ok(Some(b));
                    }
                    continue;
                }
                if upper.is_empty() && ov.is_empty() {
                    self.paths.passed += n as u64;
                    let columns = deep.columns(&chunk);
                    return self.batch(columns, n).map(Some);
                }
                let batch = self.patch(chunk, upper, ov)?;
                if batch.num_rows() > 0 {
                    return Ok(Some(batch));
                }
                continue;
            }
            // Row merge. Versions of the last key may continue in the next chunk, and upper
            // keys past it must follow it: both wait.
            let mut all = std::mem::take(&mut self.carry);
            all.extend(upper);
            all.extend(self.overlay_entries(ov));
            deep.versions(&self.table, &chunk, 0..n, &mut all)?;
            let (carry, versions): (Vec<Entry>, Vec<Entry>) =
                all.into_iter().partition(|e| e.key >= last);
            self.carry = carry;
            if let Some(b) = self.merged(versions)? {
                return Ok(Some(b));
            }
        }
    }

    /// The next chunk of a deep level read by position, with the overlay entries that
    /// fall in its rows spliced in (None when nothing in it is live). After the level, the
    /// overlay's keys past its last row go to the row path.
    pub(super) fn next_positioned(&mut self) -> Result<Option<RecordBatch>> {
        let (Some(deep), Some(g0)) = (self.deep.as_mut(), self.next_row) else {
            return Ok(None);
        };
        let Some(chunk) = deep.next_chunk(self.batch_rows)? else {
            self.next_row = None;
            if self.overlay_tail_only()? {
                self.deep = None;
                self.ov_tail = true;
            } else {
                self.after_deep()?;
            }
            return Ok(None);
        };
        let n = chunk.rows();
        self.paths.unversioned += n as u64;
        self.paths.positioned += n as u64;
        let g1 = g0 + n as u64;
        self.next_row = Some(g1);
        let overlay = self
            .overlay
            .clone()
            .expect("positions come with an overlay");
        let positions = overlay.positions.as_ref().expect("positions");
        // Entries placed before row g1: replacing one of the chunk's rows, deleting it, or
        // new keys going in before it.
        let from = self.ov_pos;
        let take = gallop(&positions.at[from..self.ov_end], |r| *r < g1);
        if take == 0 {
            self.paths.passed += n as u64;
            let columns = deep.columns(&chunk);
            return self.batch(columns, n).map(Some);
        }
        self.ov_pos += take;
        let mut ukeys = Vec::with_capacity(take);
        for i in from..from + take {
            let src = match overlay.entries[i].kind {
                EntryKind::Put => From::Overlay(overlay.rows[i] as usize),
                EntryKind::Delete => From::Gone,
                EntryKind::Partial => {
                    return Err(Error::Internal(
                        "a partial row in an overlay read by position".into(),
                    ));
                }
            };
            let pos = positions.at[i].checked_sub(g0).ok_or_else(|| {
                Error::Internal("an overlay entry placed before its chunk".into())
            })?;
            ukeys.push((pos as usize, positions.hit[i], src));
        }
        let base = deep.columns(&chunk);
        drop(chunk);
        let batch = self.assemble(base, n, &ukeys, Vec::new(), &[])?;
        Ok((batch.num_rows() > 0).then_some(batch))
    }

    /// Resolves versions row by row into a batch (None when no row is live).
    pub(super) fn merged(&mut self, versions: Vec<Entry>) -> Result<Option<RecordBatch>> {
        let rows = self.resolve(versions)?;
        if rows.is_empty() {
            return Ok(None);
        }
        self.paths.merged += rows.len() as u64;
        self.rows_batch(&rows).map(Some)
    }

    /// Resolves the keys of `upper` and of the overlay's entries `ov` (all within the
    /// chunk's range) over the chunk's rows and splices them in: runs of the chunk's rows,
    /// resolved rows and the overlay's whole rows are copied in key order, and a deep row
    /// under an overlay delete is dropped. Only keys with memtable versions or a partial
    /// overlay entry are resolved row by row, and a deep row's values are decoded only
    /// when nothing above it is a whole row or a delete.
    pub(super) fn patch(
        &mut self,
        chunk: Chunk,
        upper: Vec<Entry>,
        ov: std::ops::Range<usize>,
    ) -> Result<RecordBatch> {
        let overlay = self.overlay.clone();
        let (ov_entries, ov_rows): (&[Entry], &[u32]) = match &overlay {
            Some(o) => (&o.entries[ov.clone()], &o.rows[ov]),
            None => (&[], &[]),
        };
        let deep = self.deep.as_ref().expect("deep level");
        let keys = chunk.keys();
        let n = chunk.rows();
        let mut from = 0;
        let Sourced {
            ukeys,
            resolved_keys,
            mut versions,
            need_deep,
        } = sourced(&upper, ov_entries, ov_rows, self.read_seq, |key| {
            let pos = lower_bound_from(keys, from, key, false);
            from = pos;
            (pos, pos < n && keys.cmp_at(pos, key) == Ordering::Equal)
        });
        deep.versions(
            &self.table,
            &chunk,
            need_deep.iter().copied(),
            &mut versions,
        )?;
        let patched = if versions.is_empty() {
            Vec::new()
        } else {
            self.resolve(versions)?
        };
        let base = deep.columns(&chunk);
        // The chunk's own references go, so its freshly decoded columns can be written
        // in place.
        drop(chunk);
        self.assemble(base, n, &ukeys, patched, &resolved_keys)
    }

    /// Splices a chunk's `n` rows (`base`, its projected columns) with the keys of `ukeys`
    /// (in key order: position in the chunk, whether they replace the row there, and where
    /// their row comes from): rows resolved row by row (`patched`, for `resolved_keys`)
    /// and whole rows of the overlay.
    pub(super) fn assemble(
        &mut self,
        base: Vec<ArrayRef>,
        n: usize,
        ukeys: &[(usize, bool, From)],
        patched: Vec<(Bytes, RowValues)>,
        resolved_keys: &[Bytes],
    ) -> Result<RecordBatch> {
        let overlay = self.overlay.clone();
        let hits = ukeys.iter().filter(|u| u.1).count();
        // Segments of the output: (source, start, end); sources: 0 = chunk, 1 = resolved
        // rows, 2 = the overlay's whole rows.
        let mut segments: Vec<(usize, usize, usize)> = Vec::with_capacity(2 * ukeys.len() + 1);
        let push =
            |segments: &mut Vec<(usize, usize, usize)>, src: usize, row: usize| match segments
                .last_mut()
            {
                Some((s, _, end)) if *s == src && *end == row => *end = row + 1,
                _ => segments.push((src, row, row + 1)),
            };
        let (mut at, mut p) = (0, 0);
        let mut overlaid = 0u64;
        // When every key replaces a deep row one for one (updates: no new key, no delete),
        // the rows to overwrite in place: (position, source, row).
        let mut writes: Option<Vec<(usize, usize, usize)>> = Some(Vec::with_capacity(ukeys.len()));
        for (pos, hit, src) in ukeys {
            if *pos > at {
                segments.push((0, at, *pos));
                at = *pos;
            }
            let write = match src {
                From::Resolved(r) => {
                    if patched
                        .get(p)
                        .is_some_and(|(pk, _)| *pk == resolved_keys[*r])
                    {
                        push(&mut segments, 1, p);
                        p += 1;
                        Some((*pos, 1, p - 1))
                    } else {
                        None
                    }
                }
                From::Overlay(r) => {
                    push(&mut segments, 2, *r);
                    overlaid += 1;
                    Some((*pos, 2, *r))
                }
                From::Gone => {
                    overlaid += 1;
                    None
                }
            };
            match (write, *hit, writes.as_mut()) {
                (Some(w), true, Some(ws)) => ws.push(w),
                _ => writes = None,
            }
            if *hit {
                at = pos + 1;
            }
        }
        if at < n {
            segments.push((0, at, n));
        }
        let total: usize = segments.iter().map(|(_, a, b)| b - a).sum();
        self.paths.passed += (n - hits) as u64;
        self.paths.patched += patched.len() as u64;
        self.paths.overlaid += overlaid;
        let patch = self.table.to_batch(&patched, &self.projection)?;
        let cast_to = |a: &ArrayRef, b: &ArrayRef| -> Result<ArrayRef> {
            if a.data_type() == b.data_type() {
                Ok(a.clone())
            } else {
                cast(a, b.data_type()).map_err(|e| Error::Internal(e.to_string()))
            }
        };
        let mut columns = Vec::with_capacity(base.len());
        for (c, b) in base.into_iter().enumerate() {
            let p = cast_to(patch.column(c), &b)?;
            let o = match &overlay {
                Some(o) => match &self.ov_columns[c] {
                    Some(a) if a.data_type() == b.data_type() => a.clone(),
                    _ => {
                        let a = cast_to(o.batch.column(self.projection[c]), &b)?;
                        self.ov_columns[c] = Some(a.clone());
                        a
                    }
                },
                None => p.clone(),
            };
            let b = match &writes {
                Some(ws) => match overwrite(b, [&p, &o], ws) {
                    Ok(a) => {
                        columns.push(a);
                        continue;
                    }
                    Err(b) => b,
                },
                None => b,
            };
            columns.push(splice([&b, &p, &o], &segments, total)?);
        }
        self.batch(columns, total)
    }
}
