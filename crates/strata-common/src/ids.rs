//! Object names embed ids that are never reused. Numeric ids are zero-padded to 20 digits
//! so that lexicographic order (what object stores list in) equals numeric order.

/// Formats a numeric id for an object name: 20 digits, zero-padded.
pub fn format_id(id: u64) -> String {
    format!("{id:020}")
}

/// Parses the id from the last path segment of an object name (`.../00000000000000000042.wal`
/// gives 42). Returns `None` for names that are not ids.
pub fn parse_id(name: &str) -> Option<u64> {
    let last = name.rsplit('/').next()?;
    let stem = last.split('.').next()?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sort() {
        assert_eq!(parse_id(&format!("wal/{}.wal", format_id(42))), Some(42));
        assert!(format_id(9) < format_id(10));
        assert_eq!(parse_id("wal/fence"), None);
        assert_eq!(parse_id("0042"), None);
    }
}
