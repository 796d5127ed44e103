//! `strata sql`: SQL against a running Strata over Arrow Flight SQL, one statement from the
//! command line or an interactive session (statements end with `;`).

use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use strata_query::http::{Format, encode};
use tonic::transport::Channel;

/// How `strata sql` prints results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// An aligned text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of row objects.
    Json,
    /// One JSON object per line.
    Ndjson,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Flight SQL session with a server.
pub struct SqlClient {
    client: FlightSqlServiceClient<Channel>,
}

impl SqlClient {
    /// Connects to `flight` (`host:port`, `http://` or `https://` URL) with an optional API
    /// key; over TLS the server's certificate is checked against `ca` (PEM) when given, else
    /// against the system's roots.
    pub async fn connect(
        flight: &str,
        key: Option<&str>,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, BoxError> {
        let url = if flight.contains("://") {
            flight.to_string()
        } else {
            format!("http://{flight}")
        };
        let mut endpoint = Channel::from_shared(url.clone()).map_err(|e| format!("{url}: {e}"))?;
        if url.starts_with("https://") {
            let mut tls = tonic::transport::ClientTlsConfig::new();
            tls = match ca {
                Some(path) => {
                    let pem = std::fs::read(path)
                        .map_err(|e| format!("reading --ca-cert {}: {e}", path.display()))?;
                    tls.ca_certificate(tonic::transport::Certificate::from_pem(pem))
                }
                None => tls.with_native_roots(),
            };
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("{url}: {e}"))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("connecting to {url}: {e}"))?;
        let mut client = FlightSqlServiceClient::new(channel);
        if let Some(k) = key {
            client.set_token(k.to_string());
        }
        Ok(Self { client })
    }

    /// The schema of a table, or None when it does not exist (asks the server to plan
    /// `SELECT * ... LIMIT 0`; nothing is read).
    pub async fn table_schema(
        &mut self,
        table: &str,
    ) -> Result<Option<arrow::datatypes::SchemaRef>, BoxError> {
        let quoted: Vec<String> = table
            .split('.')
            .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
            .collect();
        let sql = format!("SELECT * FROM {} LIMIT 0", quoted.join("."));
        match self.client.execute(sql, None).await {
            Ok(info) => Ok(Some(std::sync::Arc::new(info.try_decode_schema()?))),
            Err(FlightError::Tonic(s)) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(flight_error(e)),
        }
    }

    /// Streams batches into a table (Flight SQL bulk ingest); the rows the server wrote.
    pub async fn ingest<S>(
        &mut self,
        command: arrow_flight::sql::CommandStatementIngest,
        batches: S,
    ) -> Result<i64, BoxError>
    where
        S: futures::Stream<Item = Result<RecordBatch, FlightError>> + Send + 'static,
    {
        self.client
            .execute_ingest(command, batches)
            .await
            .map_err(flight_error)
    }

    /// Runs one statement; its results (DDL and DML answer one row too).
    pub async fn run(&mut self, sql: &str) -> Result<Vec<RecordBatch>, BoxError> {
        let info = self
            .client
            .execute(sql.to_string(), None)
            .await
            .map_err(flight_error)?;
        let mut out = Vec::new();
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let batches: Vec<RecordBatch> = self
                .client
                .do_get(ticket)
                .await
                .map_err(flight_error)?
                .try_collect()
                .await
                .map_err(flight_error)?;
            out.extend(batches);
        }
        Ok(out)
    }
}

/// The server's message (a gRPC status carries the code and text of Strata's error).
fn flight_error(e: FlightError) -> BoxError {
    match e {
        FlightError::Tonic(status) => status.message().to_string().into(),
        other => other.to_string().into(),
    }
}

/// Renders batches for the terminal or a pipe.
pub fn render(batches: &[RecordBatch], output: Output) -> Result<String, BoxError> {
    let format = match output {
        Output::Table => {
            return Ok(arrow::util::pretty::pretty_format_batches(batches)?.to_string() + "\n");
        }
        Output::Csv => Format::Csv,
        Output::Json => Format::Json,
        Output::Ndjson => Format::NdJson,
    };
    let Some(first) = batches.first() else {
        return Ok(String::new());
    };
    let bytes = encode(format, &first.schema(), batches).map_err(|e| e.message)?;
    let mut text = String::from_utf8(bytes)?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// `strata sql`: one statement, or a session reading statements from stdin.
pub async fn sql(
    flight: &str,
    key: Option<&str>,
    ca: Option<&std::path::Path>,
    output: Output,
    statement: Option<String>,
) -> Result<(), BoxError> {
    let mut client = SqlClient::connect(flight, key, ca).await?;
    if let Some(s) = statement {
        let batches = client.run(&s).await?;
        print!("{}", render(&batches, output)?);
        return Ok(());
    }
    let interactive = std::io::stdin().is_terminal();
    let mut input = if interactive {
        eprintln!("connected to {flight}; end statements with ';', \\q quits");
        Input::editor()?
    } else {
        Input::Piped(std::io::stdin().lock().lines())
    };
    let mut pending = String::new();
    let mut failed = false;
    loop {
        let prompt = if pending.is_empty() {
            "strata> "
        } else {
            "   ...> "
        };
        let Some(line) = input.next_line(prompt)? else {
            break;
        };
        if pending.is_empty() && matches!(line.trim(), "\\q" | "quit" | "exit") {
            break;
        }
        pending.push_str(&line);
        pending.push('\n');
        let Some(end) = pending.rfind(';') else {
            continue;
        };
        if !pending[end + 1..].trim().is_empty() {
            continue;
        }
        let statement = std::mem::take(&mut pending);
        input.remember(statement.trim());
        let statement = statement.trim().trim_end_matches(';').trim();
        if statement.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        match client.run(statement).await {
            Ok(batches) => {
                print!("{}", render(&batches, output)?);
                std::io::stdout().flush()?;
                if interactive {
                    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                    eprintln!("({rows} rows, {:.3} s)", t0.elapsed().as_secs_f64());
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    input.save();
    if !pending.trim().is_empty() {
        return Err("the input ended inside a statement (missing ';')".into());
    }
    if failed && !interactive {
        return Err("a statement failed".into());
    }
    Ok(())
}

/// Where `strata sql` reads statements: a line editor on a terminal (arrow keys, Ctrl-R,
/// history kept in `$STRATA_HISTORY`, else `~/.strata_history`), else stdin as it comes.
enum Input {
    Editor(
        Box<rustyline::Editor<(), rustyline::history::FileHistory>>,
        Option<std::path::PathBuf>,
    ),
    Piped(std::io::Lines<std::io::StdinLock<'static>>),
}

impl Input {
    fn editor() -> Result<Self, BoxError> {
        let mut editor = rustyline::DefaultEditor::new()?;
        let history = std::env::var_os("STRATA_HISTORY")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| std::path::PathBuf::from(h).join(".strata_history"))
            });
        if let Some(path) = &history {
            // A first session has no history yet.
            let _ = editor.load_history(path);
        }
        Ok(Input::Editor(Box::new(editor), history))
    }

    /// The next line, or None at the end of the input (Ctrl-D); Ctrl-C drops the line.
    fn next_line(&mut self, prompt: &str) -> Result<Option<String>, BoxError> {
        match self {
            Input::Editor(editor, _) => match editor.readline(prompt) {
                Ok(line) => Ok(Some(line)),
                Err(rustyline::error::ReadlineError::Interrupted) => Ok(Some(String::new())),
                Err(rustyline::error::ReadlineError::Eof) => Ok(None),
                Err(e) => Err(e.into()),
            },
            Input::Piped(lines) => Ok(lines.next().transpose()?),
        }
    }

    /// Puts a whole statement into the history (one entry, however many lines).
    fn remember(&mut self, statement: &str) {
        if let Input::Editor(editor, _) = self {
            let _ = editor.add_history_entry(statement);
        }
    }

    /// Writes the history file.
    fn save(&mut self) {
        if let Input::Editor(editor, Some(path)) = self
            && let Err(e) = editor.save_history(path)
        {
            eprintln!("could not save the history to {}: {e}", path.display());
        }
    }
}
