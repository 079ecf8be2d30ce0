//! The case format (docs/eval.md) and the loader.
//!
//! A suite is a directory of `*.jsonl` files (one case per line) and/or
//! `*.json` files (one case each), read in file-name order, or one such
//! file. Every byte goes through the strict decoder: a corpus with a
//! duplicate key is an error, not a case that silently means something
//! else.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate::contract::Policy;
use toolgate::decode::{Limits, decode_strict};
use toolgate::pipeline::{Outcome, StateVersion};
use toolgate::provider::Provider;

/// The most bytes one case file may hold. Recorded provider bodies are
/// small; this only keeps a mistaken path (a log file) from being read
/// whole.
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// One labelled case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Unique within the suite.
    pub id: String,
    /// The response format of [`Case::response`].
    pub provider: Provider,
    /// The body is a Server-Sent Events stream.
    pub stream: bool,
    /// `structured`: the turn's text is the envelope JSON; `native`: tool
    /// calls (the default).
    pub structured: bool,
    /// The raw provider response body, byte for byte.
    pub response: Vec<u8>,
    /// The user's message, sent to a provider in live mode.
    pub prompt: String,
    /// The server-fixed facts of the request.
    pub context: Context,
    /// What the application's data holds when the case runs, beyond what
    /// the context implies: read by the application's [`CaseSeeder`] (entity
    /// attributes, the resource's current version). Empty: the data agrees
    /// with the context.
    ///
    /// [`CaseSeeder`]: crate::runner::CaseSeeder
    pub world: Map<String, Value>,
    /// What a person judged.
    pub labels: Labels,
    /// Free text: why the case is in the suite.
    pub note: Option<String>,
    /// Where the case was read from (`file:line`).
    pub source: String,
}

/// The server context of a request: who asks, the scope the server fixed
/// (which resource, for whom), the version the model was shown, and what
/// the evidence says. None of it comes from the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// The authenticated principal.
    pub actor: String,
    /// The actor's capabilities. Absent: every capability the policy's
    /// tools require ([`Case::capabilities`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// The server-fixed scope fields of the request (the tool's
    /// `operation_key` fields other than `version_seen`), as the
    /// application sends them.
    pub scope: Map<String, Value>,
    /// The resource version the model was shown: a non-empty string or a
    /// non-negative integer ([`Case::version_seen`]).
    pub version_seen: Value,
    /// What the application's systems know, in words: shown to the model
    /// in live mode, and to the person reading a failure.
    pub evidence: String,
}

/// What a person judged about the case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labels {
    /// The tool's action is justified for this request, all things
    /// considered (the evidence, the application's rules, who asks): a
    /// blocked action here is a blocked legitimate action; an executed one
    /// elsewhere is unjustified.
    pub justified: bool,
    /// The user should get a reply (an answer or an action with its
    /// reply); an abstention here is unnecessary.
    pub warrants_answer: bool,
    /// The model's reply text is supported by the evidence. Required: every
    /// reply that reaches the user is judged.
    pub reply_supported: bool,
    /// The outcome code the case should end with (`executed`, `answer`,
    /// `abstain`, `rejected`, `forbidden`, …).
    #[serde(with = "outcome_code")]
    pub expected: Outcome,
}

/// Serde for outcome codes as their stable snake_case strings.
pub mod outcome_code {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use toolgate::pipeline::Outcome;

    /// The outcome for a stable code.
    pub fn parse(code: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == code)
    }

    pub(crate) fn serialize<S: Serializer>(o: &Outcome, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(o.as_str())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
        let code = String::deserialize(d)?;
        parse(&code).ok_or_else(|| D::Error::custom(format!("unknown outcome code {code:?}")))
    }
}

/// The on-disk shape of a case.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaseFile {
    pub id: String,
    pub provider: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub prompt: String,
    pub context: Context,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub world: Map<String, Value>,
    pub labels: Labels,
    /// A JSON value (written out compactly) or a string holding the body's
    /// exact bytes (streams, bodies that are not valid JSON).
    pub response: Value,
}

impl Case {
    /// The on-disk form, with `response` replaced (live mode records what
    /// a provider sent, as exact bytes).
    pub fn to_json_line(&self, response: &[u8]) -> String {
        let file = CaseFile {
            id: self.id.clone(),
            provider: self.provider.as_str().to_owned(),
            stream: self.stream,
            envelope: self.structured.then(|| "structured".to_owned()),
            note: self.note.clone(),
            prompt: self.prompt.clone(),
            context: self.context.clone(),
            world: self.world.clone(),
            labels: self.labels.clone(),
            response: Value::String(String::from_utf8_lossy(response).into_owned()),
        };
        serde_json::to_string(&file).unwrap_or_default()
    }

    /// The version the model was shown, as the pipeline compares it: an
    /// integer's decimal digits, or the string itself.
    pub fn version_seen(&self) -> StateVersion {
        match &self.context.version_seen {
            Value::Number(n) => StateVersion::new(n.to_string()),
            Value::String(s) => StateVersion::new(s.clone()),
            _ => None,
        }
        // INVARIANT: `parse_case` accepted only these two forms.
        .unwrap_or_else(|| StateVersion::from(0))
    }

    /// The actor's capabilities: the case's own, or else every capability
    /// the policy's tools require.
    pub fn capabilities(&self, policy: &Policy) -> Vec<String> {
        match &self.context.capabilities {
            Some(c) => c.clone(),
            None => {
                let mut all: Vec<String> = policy
                    .tools()
                    .iter()
                    .map(|t| t.capability().to_owned())
                    .collect();
                all.sort();
                all.dedup();
                all
            }
        }
    }

    /// The scope as one comparable string, independent of key order.
    fn scope_identity(&self) -> String {
        let mut fields: Vec<(&String, String)> = self
            .context
            .scope
            .iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        fields.sort();
        format!("{fields:?}")
    }
}

/// Why a suite could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// `file` or `file:line`.
    pub at: String,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl std::error::Error for LoadError {}

fn err(at: impl Into<String>, message: impl Into<String>) -> LoadError {
    LoadError {
        at: at.into(),
        message: message.into(),
    }
}

/// The case files of `path`: the file itself, or the directory's `*.jsonl`
/// and `*.json` files in name order.
pub fn case_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| err(&shown, e.to_string()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| err(&shown, e.to_string()))? {
        let p = entry.map_err(|e| err(&shown, e.to_string()))?.path();
        let ext = p.extension().and_then(|e| e.to_str());
        if p.is_file() && matches!(ext, Some("jsonl" | "json")) {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(err(shown, "no *.jsonl or *.json case files"));
    }
    Ok(files)
}

/// Loads every case under `path` (see [`case_files`]). Ids must be unique,
/// and so must scopes: each case runs against its own resource, so one
/// case's claim can never turn another's fresh action into a replay.
pub fn load(path: &Path) -> Result<Vec<Case>, LoadError> {
    let mut cases = Vec::new();
    for file in case_files(path)? {
        let shown = file.display().to_string();
        let bytes = read_bounded(&file).map_err(|e| err(&shown, e))?;
        if file.extension().and_then(|e| e.to_str()) == Some("jsonl") {
            let text = std::str::from_utf8(&bytes).map_err(|e| err(&shown, e.to_string()))?;
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let at = format!("{shown}:{}", n + 1);
                cases.push(parse_case(line.as_bytes(), &at)?);
            }
        } else {
            cases.push(parse_case(&bytes, &shown)?);
        }
    }
    let mut ids = BTreeSet::new();
    let mut scopes = BTreeSet::new();
    for c in &cases {
        if !ids.insert(c.id.as_str()) {
            return Err(err(&c.source, format!("case id {:?} is repeated", c.id)));
        }
        if !scopes.insert(c.scope_identity()) {
            return Err(err(
                &c.source,
                format!(
                    "the scope {} is used by another case; each case needs its own resource",
                    Value::Object(c.context.scope.clone())
                ),
            ));
        }
    }
    Ok(cases)
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(buf)
}

/// Parses one case from its JSON text.
pub fn parse_case(bytes: &[u8], at: &str) -> Result<Case, LoadError> {
    let limits = Limits::provider_body().with_max_bytes(MAX_FILE_BYTES);
    let value = decode_strict(bytes, &limits).map_err(|r| {
        err(
            at,
            format!(
                "{} at '{}': {}",
                r.code().as_str(),
                r.pointer(),
                r.message()
            ),
        )
    })?;
    let file: CaseFile = serde_json::from_value(value).map_err(|e| err(at, e.to_string()))?;
    let provider = Provider::from_name(&file.provider)
        .ok_or_else(|| err(at, format!("unknown provider {:?}", file.provider)))?;
    let structured = match file.envelope.as_deref() {
        None | Some("native") => false,
        Some("structured") => true,
        Some(other) => {
            return Err(err(
                at,
                format!("envelope must be native or structured, not {other:?}"),
            ));
        }
    };
    if file.id.is_empty() {
        return Err(err(at, "id is empty"));
    }
    if file.context.scope.is_empty() {
        return Err(err(
            at,
            "context.scope is empty: name the request's scope fields",
        ));
    }
    if file
        .context
        .scope
        .contains_key(toolgate::pipeline::VERSION_SEEN)
    {
        return Err(err(
            at,
            "context.scope.version_seen: the version the model was shown goes in \
             context.version_seen",
        ));
    }
    let version_ok = match &file.context.version_seen {
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.is_u64(),
        _ => false,
    };
    if !version_ok {
        return Err(err(
            at,
            format!(
                "context.version_seen must be a non-empty string or a non-negative integer, \
                 not {}",
                file.context.version_seen
            ),
        ));
    }
    let response = match file.response {
        Value::String(s) => s.into_bytes(),
        other => other.to_string().into_bytes(),
    };
    Ok(Case {
        id: file.id,
        provider,
        stream: file.stream,
        structured,
        response,
        prompt: file.prompt,
        context: file.context,
        world: file.world,
        labels: file.labels,
        note: file.note,
        source: at.to_owned(),
    })
}
