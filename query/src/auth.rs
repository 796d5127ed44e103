//! API keys: who may read, write or administer the tables of which namespace.
//!
//! A *namespace* groups tables: a table named `sales.orders` is table `orders` of namespace
//! `sales`; a name without a dot is in namespace [`DEFAULT_NAMESPACE`]. In SQL a namespace
//! is a schema (`SELECT * FROM sales.orders`).
//!
//! Keys are configured in a TOML file (`strata serve --auth-keys keys.toml`); the file holds
//! the SHA-256 of each key, never the key:
//!
//! ```toml
//! [[keys]]
//! name = "sales-reader"          # shows up in logs
//! sha256 = "9f86d08188..."       # printf %s "$KEY" | sha256sum
//! namespace = "sales"            # or "*" for every namespace
//! scope = "read"                 # read | write | admin
//! ```
//!
//! Scopes nest: `write` includes `read`, `admin` includes both. `read`: queries, point
//! gets, scans, listing and describing tables. `write`: upserts, updates, deletes,
//! `INSERT`/`UPDATE`/`DELETE`. `admin`: creating and dropping tables.
//!
//! Callers send `Authorization: Bearer <key>` (HTTP and gRPC metadata alike), or Basic
//! credentials with the key as the password (for clients that only speak user and
//! password; the user name is not checked). Without a
//! keys file the service is open (the embedded default on 127.0.0.1): every caller has
//! every scope on every namespace.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{QueryError, QueryErrorKind};

/// The namespace of tables whose names have no dot (SQL schema `public`).
pub const DEFAULT_NAMESPACE: &str = "public";

/// What a key may do in its namespace; each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Queries, point gets, scans, listing and describing tables.
    Read,
    /// Upserts, updates, deletes.
    Write,
    /// Creating and dropping tables.
    Admin,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

/// The caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name (for logs), or `anonymous` when auth is off.
    pub name: String,
    /// The namespace the key is for; None = every namespace.
    namespace: Option<String>,
    scope: Scope,
}

impl Principal {
    /// Every scope on every namespace (auth off, embedded use, benchmarks).
    pub fn unrestricted() -> Self {
        Self {
            name: "anonymous".into(),
            namespace: None,
            scope: Scope::Admin,
        }
    }

    /// Whether the caller has `scope` on `namespace`.
    pub fn allows(&self, namespace: &str, scope: Scope) -> bool {
        self.scope >= scope && self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    /// Whether the key is for every namespace (`namespace = "*"`).
    pub fn all_namespaces(&self) -> bool {
        self.namespace.is_none()
    }

    /// Whether the caller can see `namespace` at all (at least `read`).
    pub fn can_read(&self, namespace: &str) -> bool {
        self.allows(namespace, Scope::Read)
    }

    /// [`Principal::allows`] as an error (403) naming what was missing.
    pub fn check(&self, namespace: &str, scope: Scope) -> Result<(), QueryError> {
        if self.allows(namespace, scope) {
            return Ok(());
        }
        Err(QueryError::new(
            QueryErrorKind::Forbidden,
            format!(
                "key {:?} has no {} scope on namespace {namespace:?}",
                self.name,
                scope.name()
            ),
        ))
    }
}

/// The namespace and the table of a Strata table name (`ns.table`, or `table` in
/// [`DEFAULT_NAMESPACE`]).
pub fn split_name(table: &str) -> (&str, &str) {
    match table.split_once('.') {
        Some((ns, t)) => (ns, t),
        None => (DEFAULT_NAMESPACE, table),
    }
}

/// The Strata table name of `table` in `namespace`.
pub fn qualified(namespace: &str, table: &str) -> String {
    if namespace == DEFAULT_NAMESPACE {
        table.to_string()
    } else {
        format!("{namespace}.{table}")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    sha256: String,
    namespace: String,
    scope: Scope,
}

/// The configured API keys.
#[derive(Debug, Clone)]
pub struct Auth {
    keys: Vec<([u8; 32], Principal)>,
}

impl Auth {
    /// Parses a keys file (see the module documentation).
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let file: KeysFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if file.keys.is_empty() {
            return Err("no [[keys]]: with auth on, nobody could call the service".into());
        }
        let mut keys = Vec::new();
        for (i, k) in file.keys.into_iter().enumerate() {
            let at = format!("keys[{i}] ({})", k.name);
            let digest = hex::decode(k.sha256.trim())
                .ok()
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| format!("{at}.sha256: expected 64 hex digits (SHA-256)"))?;
            if keys.iter().any(|(d, _)| *d == digest) {
                return Err(format!("{at}: the same key is configured twice"));
            }
            let namespace = match k.namespace.as_str() {
                "*" => None,
                ns if valid_namespace(ns) => Some(ns.to_string()),
                ns => {
                    return Err(format!(
                        "{at}.namespace: {ns:?} is not \"*\" or a namespace name (letters, digits, '_' or '-', not starting with '-')"
                    ));
                }
            };
            keys.push((
                digest,
                Principal {
                    name: k.name,
                    namespace,
                    scope: k.scope,
                },
            ));
        }
        Ok(Self { keys })
    }

    /// Reads a keys file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the keys file {}: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| format!("keys file {}: {e}", path.display()))
    }

    /// The caller holding the key in an `Authorization` header value (see [`key_of`]).
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, QueryError> {
        let unauthenticated = |m: &str| QueryError::new(QueryErrorKind::Unauthenticated, m);
        let value = authorization.ok_or_else(|| {
            unauthenticated("an API key is required: send Authorization: Bearer <key>")
        })?;
        let key = key_of(value).ok_or_else(|| {
            unauthenticated(
                "the Authorization header must be Bearer <key>, or Basic with the key as the password",
            )
        })?;
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.keys
            .iter()
            .find(|(d, _)| *d == digest)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| unauthenticated("unknown API key"))
    }
}

/// The API key in an `Authorization` header value: `Bearer <key>`, or `Basic` credentials
/// whose password is the key (the user name is not checked: clients that only speak user
/// and password, such as JDBC tools, pass the key that way).
pub fn key_of(authorization: &str) -> Option<String> {
    use base64::Engine;
    let value = authorization.trim();
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    let key = if scheme.eq_ignore_ascii_case("bearer") {
        rest.to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':')?.1.to_string()
    } else {
        return None;
    };
    (!key.is_empty()).then_some(key)
}

/// Authenticates requests: with keys, or open (every caller unrestricted).
#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    auth: Option<std::sync::Arc<Auth>>,
}

impl Authenticator {
    /// Every caller is unrestricted.
    pub fn open() -> Self {
        Self { auth: None }
    }

    /// Callers need one of `auth`'s keys.
    pub fn with_keys(auth: Auth) -> Self {
        Self {
            auth: Some(std::sync::Arc::new(auth)),
        }
    }

    /// Whether keys are required.
    pub fn enabled(&self) -> bool {
        self.auth.is_some()
    }

    /// The caller of a request with this `Authorization` header value.
    pub fn principal(&self, authorization: Option<&str>) -> Result<Principal, QueryError> {
        match &self.auth {
            None => Ok(Principal::unrestricted()),
            Some(a) => a.authenticate(authorization),
        }
    }
}

/// A name the engine accepts before the dot of a table name (see `Db::create_table`).
fn valid_namespace(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= 64
        && !ns.starts_with('-')
        && ns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(k: &str) -> String {
        hex::encode(Sha256::digest(k.as_bytes()))
    }

    fn keys() -> Auth {
        Auth::from_toml(&format!(
            r#"
            [[keys]]
            name = "sales-read"
            sha256 = "{}"
            namespace = "sales"
            scope = "read"

            [[keys]]
            name = "root"
            sha256 = "{}"
            namespace = "*"
            scope = "admin"
            "#,
            sha("k1"),
            sha("k2")
        ))
        .unwrap()
    }

    #[test]
    fn basic_credentials_carry_the_key_as_their_password() {
        use base64::Engine;
        let basic = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(key_of("Bearer k1").as_deref(), Some("k1"));
        assert_eq!(key_of("bearer  k1 ").as_deref(), Some("k1"));
        assert_eq!(key_of(&basic("anyone:k1")).as_deref(), Some("k1"));
        assert_eq!(
            key_of(&basic("anyone:with:colons")).as_deref(),
            Some("with:colons")
        );
        assert_eq!(key_of(&basic("no-password:")), None);
        assert_eq!(key_of(&basic("no colon")), None);
        assert_eq!(key_of("Basic !!!"), None);
        assert_eq!(key_of("Digest x"), None);
        let a = keys();
        let p = a.authenticate(Some(&basic("bi-tool:k1"))).unwrap();
        assert!(p.can_read("sales") && !p.can_read("hr"));
        assert!(a.authenticate(Some(&basic("bi-tool:wrong"))).is_err());
    }

    #[test]
    fn keys_map_to_scopes_per_namespace() {
        let a = keys();
        let p = a.authenticate(Some("Bearer k1")).unwrap();
        assert!(p.allows("sales", Scope::Read));
        assert!(!p.allows("sales", Scope::Write));
        assert!(!p.allows("hr", Scope::Read));
        assert_eq!(
            p.check("hr", Scope::Read).unwrap_err().kind,
            QueryErrorKind::Forbidden
        );
        let root = a.authenticate(Some("Bearer k2")).unwrap();
        assert!(root.allows("hr", Scope::Admin));
        for bad in [None, Some("Bearer nope"), Some("Basic k1"), Some("Bearer ")] {
            assert_eq!(
                a.authenticate(bad).unwrap_err().kind,
                QueryErrorKind::Unauthenticated,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bad_files_are_refused_with_the_field() {
        let e =
            Auth::from_toml("[[keys]]\nname='x'\nsha256='abc'\nnamespace='sales'\nscope='read'\n")
                .unwrap_err();
        assert!(e.contains("keys[0] (x).sha256"), "{e}");
        for ns in ["a.b", "-a", ""] {
            let e = Auth::from_toml(&format!(
                "[[keys]]\nname='x'\nsha256='{}'\nnamespace='{ns}'\nscope='read'\n",
                sha("k")
            ))
            .unwrap_err();
            assert!(e.contains("keys[0] (x).namespace"), "{ns}: {e}");
        }
        let e = Auth::from_toml(&format!(
            "[[keys]]\nname='x'\nsha256='{}'\nnamespace='a'\nscope='root'\n",
            sha("k")
        ))
        .unwrap_err();
        assert!(e.contains("scope") || e.contains("root"), "{e}");
        assert!(Auth::from_toml("").is_err());
    }

    #[test]
    fn names_split_into_namespace_and_table() {
        assert_eq!(split_name("sales.orders"), ("sales", "orders"));
        assert_eq!(split_name("orders"), (DEFAULT_NAMESPACE, "orders"));
        assert_eq!(qualified("sales", "orders"), "sales.orders");
        assert_eq!(qualified(DEFAULT_NAMESPACE, "orders"), "orders");
    }
}
