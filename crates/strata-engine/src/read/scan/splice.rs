//! Splicing resolved rows into a deep chunk's columns: runs of rows copied from the chunk
//! and from the rows resolved above it, and values overwritten in place where only some
//! columns changed. Arrow arrays in, Arrow arrays out.

use super::*;

/// Where a key's output row comes from in a patched chunk.
pub(super) enum From {
    /// Resolved row by row: the i-th such key.
    Resolved(usize),
    /// A whole row of the overlay (its batch row).
    Overlay(usize),
    /// Deleted.
    Gone,
}

/// Overwrites rows of a freshly decoded primitive column in place: `writes` are
/// (position, source, row) with source 1 or 2 indexing `sources` (0 and 1 here). Gives
/// `base` back when it cannot: another type, nulls among the new values, or a buffer
/// shared with another array (a sliced batch).
pub(super) fn overwrite(
    base: ArrayRef,
    sources: [&ArrayRef; 2],
    writes: &[(usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrayRef> {
    macro_rules! primitive {
        ($t:ty) => {
            overwrite_primitive::<$t>(base, sources, writes)
        };
    }
    downcast_primitive! {
        base.data_type() => (primitive),
        _ => Err(base)
    }
}

pub(super) fn overwrite_primitive<T: ArrowPrimitiveType>(
    base: ArrayRef,
    sources: [&ArrayRef; 2],
    writes: &[(usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrayRef> {
    if sources
        .iter()
        .any(|a| a.null_count() > 0 || a.data_type() != base.data_type())
    {
        return Err(base);
    }
    let array = base.as_primitive::<T>().clone();
    drop(base);
    let data_type = array.data_type().clone();
    let mut builder = match array.into_builder() {
        Ok(b) => b,
        Err(array) => return Err(Arc::new(array)),
    };
    let new = sources.map(|a| a.as_primitive::<T>().values());
    let values = builder.values_slice_mut();
    for &(pos, src, row) in writes {
        values[pos] = new[src - 1][row];
    }
    if let Some(valid) = builder.validity_slice_mut() {
        for &(pos, _, _) in writes {
            arrow::util::bit_util::set_bit(valid, pos);
        }
    }
    Ok(Arc::new(builder.finish().with_data_type(data_type)))
}

/// Copies `segments` ((source, start, end) row ranges of `sources`) into one array of
/// `total` rows. Primitive columns are copied slice by slice (the common case: a few
/// hundred short runs per chunk); other types go through `MutableArrayData`.
pub(super) fn splice(
    sources: [&ArrayRef; 3],
    segments: &[(usize, usize, usize)],
    total: usize,
) -> Result<ArrayRef> {
    macro_rules! primitive {
        ($t:ty) => {
            Ok(splice_primitive::<$t>(sources, segments, total))
        };
    }
    downcast_primitive! {
        sources[0].data_type() => (primitive),
        _ => {
            let data: Vec<_> = sources.iter().map(|a| a.to_data()).collect();
            let mut out = MutableArrayData::new(data.iter().collect(), false, total);
            for &(src, start, end) in segments {
                out.try_extend(src, start, end)
                    .map_err(|e| Error::Internal(format!("splicing a scan batch: {e}")))?;
            }
            Ok(make_array(out.freeze()))
        }
    }
}

pub(super) fn splice_primitive<T: ArrowPrimitiveType>(
    sources: [&ArrayRef; 3],
    segments: &[(usize, usize, usize)],
    total: usize,
) -> ArrayRef {
    let arrays = sources.map(|a| a.as_primitive::<T>());
    let mut values: Vec<T::Native> = Vec::with_capacity(total);
    for &(src, start, end) in segments {
        values.extend_from_slice(&arrays[src].values()[start..end]);
    }
    let nulls = arrays.iter().any(|a| a.null_count() > 0).then(|| {
        let mut b = BooleanBufferBuilder::new(total);
        for &(src, start, end) in segments {
            match arrays[src].nulls() {
                Some(n) => b.append_buffer(&n.inner().slice(start, end - start)),
                None => b.append_n(end - start, true),
            }
        }
        NullBuffer::new(b.finish())
    });
    Arc::new(
        PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls)
            .with_data_type(sources[0].data_type().clone()),
    )
}
