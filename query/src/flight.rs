//! Arrow Flight SQL endpoint.
