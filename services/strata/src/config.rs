//! The `strata` configuration: one TOML document for every role.
//!
//! Settings are layered, later layers winning:
//!
//! 1. built-in defaults (see `docs/configuration.md`, which a test keeps in step with
//!    [`Config::default`]);
//! 2. the role's defaults (`strata query` never compacts or collects garbage, `strata
//!    ingest` leaves compaction to `strata compactor` processes);
//! 3. the file given with `--config` (or `STRATA_CONFIG`);
//! 4. environment variables: every setting `a.b.c` is `STRATA_A_B_C` (upper case);
//! 5. command-line flags (`--set a.b.c=value` and the per-command shortcuts).
//!
//! Unknown keys in the file or in `--set` are errors (a typo never silently falls back to a
//! default). Environment variables starting with `STRATA_` that name no setting are
//! reported in the log and otherwise ignored, since clients (`STRATA_API_KEY`) share the
//! prefix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_engine::EngineConfig;
use strata_objstore::{ObjectStoreConfig, S3Config};
use strata_query::QueryConfig;

/// Every setting of every role.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's local directory: the NVMe tier (`nvme/`), the query cache
    /// (`query-cache/`), compactor scratch space (`compactor-scratch/`) and, for the local
    /// store without `store.dir`, the bucket (`bucket/`).
    pub data_dir: PathBuf,
    /// HTTP listen address (port 0 picks a free port; the bound address is printed).
    pub http: SocketAddr,
    /// Arrow Flight SQL (gRPC) listen address.
    pub flight: SocketAddr,
    /// PostgreSQL wire protocol listen address (`psql`, psycopg, JDBC); empty: off.
    pub postgres: String,
    /// Where the bucket is.
    pub store: StoreSettings,
    /// API keys.
    pub auth: AuthSettings,
    /// TLS for both listeners.
    pub tls: TlsSettings,
    /// Logging.
    pub log: LogSettings,
    /// The compaction worker role.
    pub compactor: CompactorSettings,
    /// Shard ownership among ingest nodes.
    pub cluster: ClusterSettings,
    /// The query service.
    pub query: QueryConfig,
    /// The storage engine (ingest role; readers use the parts about reading).
    pub engine: EngineConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./strata-data"),
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            flight: SocketAddr::from(([127, 0, 0, 1], 8081)),
            postgres: "127.0.0.1:5433".to_string(),
            store: StoreSettings::default(),
            auth: AuthSettings::default(),
            tls: TlsSettings::default(),
            log: LogSettings::default(),
            compactor: CompactorSettings::default(),
            cluster: ClusterSettings::default(),
            query: QueryConfig::default(),
            engine: default_engine(),
        }
    }
}

/// The engine's settings as a service runs them: as the engine's defaults, except that the
/// hotness tracker (HotRAP) is on, so that the records point reads keep coming back to stay
/// on, or return to, the node's local disk when their files move to the bucket.
fn default_engine() -> EngineConfig {
    let mut e = EngineConfig::default();
    e.hotness.enabled = true;
    e
}

/// Which object store holds the bucket.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// A local directory (the embedded default).
    #[default]
    Local,
    /// Amazon S3 or an S3-compatible endpoint (LocalStack, MinIO); credentials from the AWS
    /// SDK's default chain.
    S3,
}

/// Where the bucket is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    /// `local` or `s3`.
    pub kind: StoreKind,
    /// The bucket directory of the local store (empty: `<data_dir>/bucket`).
    pub dir: String,
    /// The S3 bucket (required with `kind = "s3"`).
    pub bucket: String,
    /// S3 endpoint override (empty: from the AWS chain, e.g. `AWS_ENDPOINT_URL`, then AWS).
    pub endpoint: String,
    /// S3 region override (empty: from the AWS chain, then `us-east-1`).
    pub region: String,
    /// Timeout of one object-store request.
    pub request_timeout_ms: u64,
    /// Injected latency and faults under the retrying layer (tests and benchmarks only:
    /// off while every rate and latency is 0).
    pub fault: strata_objstore::FaultConfig,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            kind: StoreKind::Local,
            dir: String::new(),
            bucket: String::new(),
            endpoint: String::new(),
            region: String::new(),
            request_timeout_ms: 30_000,
            fault: strata_objstore::FaultConfig::default(),
        }
    }
}

/// API keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// The keys file (TOML `[[keys]]` with name, sha256, namespace, scope); empty: no keys,
    /// every caller may do everything (keep the listeners on 127.0.0.1).
    pub keys: String,
}

/// TLS (rustls) on the HTTP and Flight SQL listeners: both or neither of `cert` and `key`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first (empty: plain TCP).
    pub cert: String,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate.
    pub key: String,
}

/// Log output format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per event (for log shippers).
    Json,
}

/// Logging (to stderr).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` or `json`.
    pub format: LogFormat,
    /// `tracing` filter, e.g. `info` or `strata_engine=debug,info`; `RUST_LOG` wins when
    /// set.
    pub filter: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
        }
    }
}

/// The compaction worker role (its lease, heartbeat and polling periods are
/// `engine.jobs.*`, shared with in-process workers).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CompactorSettings {
    /// Worker name in job leases and logs (empty: `compactor-<process id>`).
    pub name: String,
}

/// Shard ownership among ingest nodes (`strata ingest`; see `strata_engine::cluster`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Own shards through leases in the bucket and forward requests for other nodes'
    /// shards (the ingest role's default; ignored by the other roles).
    pub enabled: bool,
    /// This node's name, unique among the ingest nodes (empty: `<hostname>-<http port>`).
    pub node: String,
    /// The HTTP address other nodes forward requests to (empty: the bound HTTP address,
    /// with the hostname for an unspecified IP such as 0.0.0.0).
    pub advertise_http: String,
    /// The gRPC address clients are redirected to (empty: like `advertise_http`).
    pub advertise_flight: String,
    /// How long a shard lease or liveness record lasts without renewal: a dead node's
    /// shards are taken over after this.
    pub lease_ms: u64,
    /// How often leases are renewed and free shards claimed (at most half of `lease_ms`).
    pub renew_ms: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            node: String::new(),
            advertise_http: String::new(),
            advertise_flight: String::new(),
            lease_ms: 10_000,
            renew_ms: 2_000,
        }
    }
}

/// A role, for its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every role in one process.
    Serve,
    /// The shard writer (data API, SQL with writes, Flight SQL).
    Ingest,
    /// A compaction worker.
    Compactor,
    /// A read-only query service.
    Query,
}

/// A configuration error, naming the setting, file or variable at fault.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err(m: impl Into<String>) -> ConfigError {
    ConfigError(m.into())
}

/// The environment variable of a setting path (`engine.jobs.poll_ms` ->
/// `STRATA_ENGINE_JOBS_POLL_MS`).
pub fn env_name(path: &str) -> String {
    format!("STRATA_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// Every setting's dotted path and default value, in document order.
pub fn settings(config: &Config) -> Vec<(String, toml::Value)> {
    let table = to_table(config);
    let mut out = Vec::new();
    leaves(&table, "", &mut out);
    out
}

fn leaves(t: &toml::Table, prefix: &str, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => leaves(inner, &path, out),
            other => out.push((path, other.clone())),
        }
    }
}

fn to_table(config: &Config) -> toml::Table {
    toml::Table::try_from(config).expect("the configuration serializes to a TOML table")
}

/// Deep-merges `over` into `base` (tables merge, other values replace).
fn overlay(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => overlay(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Sets the setting at `path` from text, typed like its current value.
fn set(table: &mut toml::Table, path: &str, text: &str, origin: &str) -> Result<(), ConfigError> {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut t = table;
    for p in &parts {
        t = match t.get_mut(*p) {
            Some(toml::Value::Table(inner)) => inner,
            _ => return Err(err(format!("{origin}: no setting `{path}`"))),
        };
    }
    let Some(current) = t.get(last) else {
        return Err(err(format!("{origin}: no setting `{path}`")));
    };
    let bad = |what: &str| err(format!("{origin}: `{path}` wants {what}, got {text:?}"));
    let value = match current {
        toml::Value::Integer(_) => toml::Value::Integer(
            text.trim()
                .replace('_', "")
                .parse()
                .map_err(|_| bad("an integer"))?,
        ),
        toml::Value::Float(_) => {
            toml::Value::Float(text.trim().parse().map_err(|_| bad("a number"))?)
        }
        toml::Value::Boolean(_) => {
            toml::Value::Boolean(text.trim().parse().map_err(|_| bad("true or false"))?)
        }
        toml::Value::Table(_) => return Err(err(format!("{origin}: `{path}` is a section"))),
        _ => toml::Value::String(text.to_string()),
    };
    t.insert(last.to_string(), value);
    Ok(())
}

/// Where the settings come from (see the module documentation).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// The TOML file.
    pub file: Option<PathBuf>,
    /// `STRATA_*` environment variables (name, value).
    pub env: Vec<(String, String)>,
    /// `path=value` assignments from the command line, in order.
    pub sets: Vec<String>,
}

impl Sources {
    /// The process's environment, and the file named by `STRATA_CONFIG` unless `file` is
    /// given.
    pub fn from_process(file: Option<PathBuf>, sets: Vec<String>) -> Self {
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("STRATA_"))
            .collect();
        let file = file.or_else(|| std::env::var_os("STRATA_CONFIG").map(PathBuf::from));
        Self { file, env, sets }
    }
}

/// Environment variables with the `STRATA_` prefix that are not settings but are read
/// elsewhere (the config file's path, the `strata sql` client's key, the process's
/// transparent huge pages, test switches).
const OTHER_VARS: &[&str] = &[
    "STRATA_CONFIG",
    strata_common::process::THP_ENV,
    "STRATA_API_KEY",
    "STRATA_CA_CERT",
    "STRATA_CACHE",
    "STRATA_REQUIRE_S3",
    "STRATA_PROPTEST_CASES",
];

/// The configuration of `role` from `sources`; also the `STRATA_*` variables that name no
/// setting (for a warning).
pub fn load(role: Role, sources: &Sources) -> Result<(Config, Vec<String>), ConfigError> {
    let mut table = to_table(&role_defaults(role));
    if let Some(path) = &sources.file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("reading {}: {e}", path.display())))?;
        let file: toml::Table = toml::from_str(&text)
            .map_err(|e| err(format!("{}: {}", path.display(), e.message())))?;
        overlay(&mut table, file);
        // Unknown keys fail here, with the file named.
        Config::deserialize(table.clone())
            .map_err(|e| err(format!("{}: {}", path.display(), e.message())))?;
    }
    let known: std::collections::HashMap<String, String> = settings(&Config::default())
        .into_iter()
        .map(|(p, _)| (env_name(&p), p))
        .collect();
    let mut unknown = Vec::new();
    let mut env = sources.env.clone();
    env.sort();
    for (name, value) in &env {
        match known.get(name) {
            Some(path) => set(&mut table, path, value, name)?,
            None if OTHER_VARS.contains(&name.as_str()) || name.starts_with("STRATA_TEST_") => {}
            None => unknown.push(name.clone()),
        }
    }
    for s in &sources.sets {
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| err(format!("--set {s}: expected path=value")))?;
        set(
            &mut table,
            path.trim(),
            value,
            &format!("--set {}", path.trim()),
        )?;
    }
    let config = Config::deserialize(table).map_err(|e| err(e.message().to_string()))?;
    config.check(role)?;
    Ok((config, unknown))
}

/// The built-in defaults with the role's own on top.
pub fn role_defaults(role: Role) -> Config {
    let mut c = Config::default();
    match role {
        Role::Serve | Role::Compactor => {}
        // Compaction runs in `strata compactor` processes, and shards are owned through leases.
        Role::Ingest => {
            c.engine.jobs.inprocess_workers = 0;
            c.cluster.enabled = true;
        }
        Role::Query => {
            c.http = SocketAddr::from(([127, 0, 0, 1], 8090));
            c.flight = SocketAddr::from(([127, 0, 0, 1], 8091));
            c.postgres = "127.0.0.1:5434".to_string();
        }
    }
    c
}

impl Config {
    /// Checks what deserializing cannot.
    fn check(&self, role: Role) -> Result<(), ConfigError> {
        if !self.postgres.is_empty() && self.postgres.parse::<SocketAddr>().is_err() {
            return Err(err(format!(
                "postgres is a listen address such as 127.0.0.1:5433 (empty: off), got {:?}",
                self.postgres
            )));
        }
        let f = &self.store.fault;
        for (name, rate) in [
            ("error_rate", f.error_rate),
            ("timeout_rate", f.timeout_rate),
            ("lost_response_rate", f.lost_response_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(err(format!(
                    "store.fault.{name} is a probability in [0, 1], got {rate}"
                )));
            }
        }
        if self.store.kind == StoreKind::S3 && self.store.bucket.is_empty() {
            return Err(err(
                "store.bucket (STRATA_STORE_BUCKET) is required with store.kind = \"s3\"",
            ));
        }
        if role == Role::Serve && self.store.kind == StoreKind::S3 {
            return Err(err(
                "strata serve runs over a local directory; use strata ingest, compactor and query with store.kind = \"s3\"",
            ));
        }
        if self.tls.cert.is_empty() != self.tls.key.is_empty() {
            return Err(err("tls.cert and tls.key go together: set both or neither"));
        }
        if self.query.batch_rows == 0 {
            return Err(err("query.batch_rows must be at least 1"));
        }
        let uploads = self.engine.wal_uploads_in_flight;
        let most = strata_engine::wal::UPLOADS_IN_FLIGHT as usize;
        if !(1..=most).contains(&uploads) {
            return Err(err(format!(
                "engine.wal_uploads_in_flight is 1 to {most}, got {uploads}"
            )));
        }
        let gather = self.engine.wal_local_upload_delay_ms;
        if gather > 60_000 {
            return Err(err(format!(
                "engine.wal_local_upload_delay_ms is 0 to 60000 (a locally durable write waits at most a minute for its upload), got {gather}"
            )));
        }
        if !(0..=19).contains(&self.engine.merge_nice) {
            return Err(err(format!(
                "engine.merge_nice is 0 to 19, got {}",
                self.engine.merge_nice
            )));
        }
        Ok(())
    }

    /// The object store settings.
    pub fn object_store(&self) -> ObjectStoreConfig {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let mut c = match self.store.kind {
            StoreKind::Local => ObjectStoreConfig::local(self.bucket_dir()),
            StoreKind::S3 => ObjectStoreConfig::s3(S3Config {
                bucket: self.store.bucket.clone(),
                region: opt(&self.store.region),
                endpoint: opt(&self.store.endpoint),
                request_timeout_ms: self.store.request_timeout_ms,
            }),
        };
        let f = &self.store.fault;
        let on = f.latency_ms > 0
            || f.latency_ms_jitter > 0
            || f.error_rate > 0.0
            || f.timeout_rate > 0.0
            || f.lost_response_rate > 0.0;
        c.fault = on.then(|| f.clone());
        c
    }

    /// The local store's bucket directory.
    pub fn bucket_dir(&self) -> PathBuf {
        if self.store.dir.is_empty() {
            self.data_dir.join("bucket")
        } else {
            PathBuf::from(&self.store.dir)
        }
    }

    /// A directory under `data_dir`.
    pub fn local(&self, name: &str) -> PathBuf {
        self.data_dir.join(name)
    }

    /// The API keys file, when configured.
    pub fn keys_file(&self) -> Option<&Path> {
        (!self.auth.keys.is_empty()).then(|| Path::new(&self.auth.keys))
    }

    /// The TLS certificate and key files, when configured.
    pub fn tls_files(&self) -> Option<(&Path, &Path)> {
        (!self.tls.cert.is_empty()).then(|| (Path::new(&self.tls.cert), Path::new(&self.tls.key)))
    }

    /// The effective configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("the configuration serializes to TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(file: Option<&Path>, env: &[(&str, &str)], sets: &[&str]) -> Sources {
        Sources {
            file: file.map(Path::to_path_buf),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            sets: sets.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("strata.toml");
        std::fs::write(
            &f,
            "data_dir = \"/srv/strata\"\n[query]\ntimeout_ms = 1000\nbatch_rows = 100\n[engine.jobs]\npoll_ms = 7\n",
        )
        .unwrap();
        let (c, unknown) = load(
            Role::Ingest,
            &sources(
                Some(&f),
                &[
                    ("STRATA_QUERY_TIMEOUT_MS", "2000"),
                    ("STRATA_HTTP", "127.0.0.1:0"),
                    ("STRATA_API_KEY", "secret"),
                    ("STRATA_NOT_A_SETTING", "1"),
                ],
                &[
                    "query.timeout_ms=3000",
                    "engine.memtable_bytes_max=1_048_576",
                ],
            ),
        )
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/srv/strata"));
        assert_eq!(c.query.batch_rows, 100, "from the file");
        assert_eq!(c.query.timeout_ms, 3000, "--set wins over env and file");
        assert_eq!(c.http.port(), 0, "from the environment");
        assert_eq!(c.engine.jobs.poll_ms, 7, "nested section from the file");
        assert_eq!(
            c.engine.jobs.inprocess_workers, 0,
            "the ingest role's default"
        );
        assert_eq!(c.engine.memtable_bytes_max, 1 << 20);
        assert_eq!(unknown, vec!["STRATA_NOT_A_SETTING".to_string()]);
        assert_eq!(c.bucket_dir(), PathBuf::from("/srv/strata/bucket"));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bad.toml");
        std::fs::write(&f, "[engine]\nmemtable_bytes = 5\n").unwrap();
        let e = load(Role::Serve, &sources(Some(&f), &[], &[])).unwrap_err();
        assert!(
            e.0.contains("bad.toml") && e.0.contains("memtable_bytes"),
            "{e}"
        );
        let e = load(
            Role::Serve,
            &sources(None, &[("STRATA_QUERY_TIMEOUT_MS", "soon")], &[]),
        )
        .unwrap_err();
        assert!(
            e.0.contains("STRATA_QUERY_TIMEOUT_MS") && e.0.contains("integer"),
            "{e}"
        );
        let e = load(Role::Serve, &sources(None, &[], &["engine.nope=1"])).unwrap_err();
        assert!(e.0.contains("no setting `engine.nope`"), "{e}");
        let e = load(Role::Serve, &sources(None, &[], &["engine=1"])).unwrap_err();
        assert!(e.0.contains("section"), "{e}");
        let e = load(Role::Serve, &sources(None, &[], &["http=nowhere"])).unwrap_err();
        assert!(e.0.contains("nowhere") || e.0.contains("address"), "{e}");
        let e = load(
            Role::Query,
            &sources(None, &[("STRATA_STORE_KIND", "s3")], &[]),
        )
        .unwrap_err();
        assert!(e.0.contains("store.bucket"), "{e}");
        let e = load(
            Role::Serve,
            &sources(
                None,
                &[("STRATA_STORE_KIND", "s3"), ("STRATA_STORE_BUCKET", "b")],
                &[],
            ),
        )
        .unwrap_err();
        assert!(e.0.contains("strata serve"), "{e}");
        for bad in ["0", "9"] {
            let e = load(
                Role::Serve,
                &sources(None, &[], &[&format!("engine.wal_uploads_in_flight={bad}")]),
            )
            .unwrap_err();
            assert!(
                e.0.contains("engine.wal_uploads_in_flight is 1 to 8, got"),
                "{e}"
            );
        }
        assert!(
            load(
                Role::Serve,
                &sources(None, &[], &["engine.wal_uploads_in_flight=8"])
            )
            .is_ok()
        );
        let e = load(
            Role::Serve,
            &sources(None, &[], &["engine.wal_local_upload_delay_ms=3600000"]),
        )
        .unwrap_err();
        assert!(
            e.0.contains("engine.wal_local_upload_delay_ms is 0 to 60000"),
            "{e}"
        );
        for ok in ["0", "60000"] {
            let setting = format!("engine.wal_local_upload_delay_ms={ok}");
            assert!(load(Role::Serve, &sources(None, &[], &[&setting])).is_ok());
        }
        for bad in ["-1", "20"] {
            let e = load(
                Role::Serve,
                &sources(None, &[], &[&format!("engine.merge_nice={bad}")]),
            )
            .unwrap_err();
            assert!(e.0.contains("engine.merge_nice is 0 to 19, got"), "{e}");
        }
        assert!(load(Role::Serve, &sources(None, &[], &["engine.merge_nice=0"])).is_ok());
    }

    #[test]
    fn role_defaults_differ_only_where_documented() {
        assert_eq!(role_defaults(Role::Serve), Config::default());
        assert_eq!(role_defaults(Role::Compactor), Config::default());
        let q = role_defaults(Role::Query);
        assert_ne!(q.http, Config::default().http);
        let i = role_defaults(Role::Ingest);
        assert_eq!(i.engine.jobs.inprocess_workers, 0);
        // Nodes that own shards track hot records (and retain and promote them).
        assert!(i.engine.hotness.enabled && role_defaults(Role::Serve).engine.hotness.enabled);
        assert!(i.engine.hotness.retention && i.engine.hotness.promotion);
        assert!(i.cluster.enabled && !Config::default().cluster.enabled);
    }

    #[test]
    fn every_setting_has_its_own_environment_variable() {
        let names: Vec<String> = settings(&Config::default())
            .iter()
            .map(|(p, _)| env_name(p))
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "two settings share a variable");
    }

    /// `docs/configuration.md` lists every setting, with its variable and default, and
    /// nothing else.
    #[test]
    fn the_configuration_document_matches_the_code() {
        let doc = include_str!("../../../docs/configuration.md");
        let mut documented = std::collections::BTreeMap::new();
        for line in doc.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 5 || !cells[1].starts_with('`') || cells[1].starts_with("`[") {
                continue;
            }
            let unquote = |s: &str| s.trim_matches('`').to_string();
            documented.insert(unquote(cells[1]), (unquote(cells[2]), unquote(cells[3])));
        }
        let mut missing = Vec::new();
        for (path, default) in settings(&Config::default()) {
            let shown = match &default {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match documented.remove(&path) {
                Some((env, doc_default)) => {
                    assert_eq!(env, env_name(&path), "variable of {path}");
                    assert_eq!(doc_default, shown, "default of {path}");
                }
                None => missing.push(format!(
                    "| `{path}` | `{}` | `{shown}` | |",
                    env_name(&path)
                )),
            }
        }
        assert!(
            missing.is_empty(),
            "settings missing from docs/configuration.md:\n{}",
            missing.join("\n")
        );
        assert!(
            documented.is_empty(),
            "docs/configuration.md documents settings that do not exist: {:?}",
            documented.keys().collect::<Vec<_>>()
        );
    }
}
