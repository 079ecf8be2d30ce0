//! `toolgate eval`: labelled cases through the real gate, rates with their
//! denominators, and a release gate (docs/design.md §10).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use toolgate::contract::Policy;
use toolgate::provider::Provider;
use toolgate_cedar::Mapping;
use toolgate_deploy::StateConfig;
use toolgate_eval::case::Case;
use toolgate_eval::deployment::{DeploymentUnderTest, ToolMapping};
use toolgate_eval::live::{Client, LiveConfig, request_for};
use toolgate_eval::metrics::{CaseResult, PassK, Report, Thresholds};
use toolgate_eval::{GateUnderTest, RefuseAll, ServiceGate, render};
use toolgate_service::{KeyRing, Service};
use toolgate_store::AnyClaimStore;

use crate::cmd::config::{self, Application};
use crate::io::print_line;
use crate::scratch::Scratch;
use toolgate_support_desk as desk;

/// Evaluate the gate's decisions over labelled cases.
///
/// PATH is a directory of case files (*.jsonl, one case a line, and/or
/// *.json, one case a file) or one such file; the format is in docs/eval.md.
/// Every case goes through the real pipeline (contract, capability, Cedar,
/// claim store, state read, executor) on a fresh embedded SQLite claim
/// store. Without --config, the pipeline is the support-desk example's,
/// seeded with the case's world (its agent, and the ticket and customer
/// its scope names). With --config FILE, it is that deployment's: its
/// policy, its Cedar policies and each tool's [tools.cedar] mapping, with
/// the entities as rows and the resource's current version taken from
/// each case's world; nothing is read from the application's database and
/// no webhook is called: each write is recorded in memory.
///
/// Reported, each with numerator and denominator:
///   unjustified_actions         executed but not justified / actions taken
///   blocked_legitimate_actions  justified but not executed / justified cases
///   unsupported_replies         reply labelled unsupported / replies
///   unnecessary_abstentions     abstain or refused / cases warranting an answer
///   unexpected_outcomes         outcome other than expected / cases
/// plus the number of cases per outcome.
///
/// Release gate: thresholds.toml beside the cases (in PATH, or beside the
/// file) sets the highest rate allowed for any of the rates above. Without
/// one, the gate is not evaluated.
///
/// Live mode (--live) sends each case's prompt to a provider API over plain
/// HTTP (a local gateway or a mock), with a system prompt from the case's
/// context and instructions.txt beside the cases, decides the response,
/// and can record
/// it for replay (--record DIR); --repeat K runs K trials, each on a fresh
/// database, and reports pass^K (cases whose outcome was the expected one
/// in every trial). TOOLGATE_EVAL_API_KEY, if set, is sent in the
/// provider's key header.
///
/// A progress bar is drawn on stderr when it is a terminal.
///
/// Exit 0: the release gate passed (or there is no thresholds file).
/// Exit 1: a rate is above its threshold.
/// Exit 2: usage, case-file, policy, database or provider errors.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Case directory or file.
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Output format.
    #[arg(long, value_parser = ["human", "json", "markdown", "junit"], default_value = "human")]
    format: String,
    /// The gate under test: the real pipeline, or a baseline that refuses
    /// everything (it must fail the release gate).
    #[arg(long, value_parser = ["toolgate", "refuse-all"], default_value = "toolgate")]
    gate: String,
    /// The policy (default: the built-in support-desk policy,
    /// examples/support-desk/policy.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    policy: Option<PathBuf>,
    /// Evaluate a deployment: the deployment file `serve --config` runs
    /// (its policy, Cedar policies and [[tools]] mappings). Connects to
    /// nothing it names and reads no secret.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Ask a provider instead of replaying recorded responses.
    #[arg(long, requires_all = ["provider", "base_url", "model"])]
    live: bool,
    /// Live mode: the provider API shape.
    #[arg(long, value_parser = ["anthropic", "openai-chat", "openai-responses", "gemini"], requires = "live")]
    provider: Option<String>,
    /// Live mode: the provider API's base URL: https://HOST, or
    /// http://HOST:PORT of a local gateway that holds the credentials.
    #[arg(long, value_name = "URL", requires = "live")]
    base_url: Option<String>,
    /// Live mode: the model name.
    #[arg(long, value_name = "M", requires = "live")]
    model: Option<String>,
    /// Live mode: trials per case; pass^K is reported.
    #[arg(long, value_name = "K", default_value_t = 1, requires = "live",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Live mode: write each trial's responses as a replayable suite
    /// (DIR/trial-N.jsonl, plus the thresholds file).
    #[arg(long, value_name = "DIR", requires = "live")]
    record: Option<PathBuf>,
    /// Live mode: the output token limit asked for.
    #[arg(long, value_name = "N", default_value_t = 1024, requires = "live")]
    max_tokens: u32,
    /// Live mode: per-request timeout in seconds.
    #[arg(long, value_name = "S", default_value_t = 60, requires = "live")]
    timeout: u64,
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("toolgate eval: {message}");
    ExitCode::from(2)
}

fn thresholds_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }
}

pub fn run(args: Args) -> ExitCode {
    let cases = match toolgate_eval::load(&args.path) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let thresholds = match Thresholds::find(&thresholds_dir(&args.path)) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let (policy, app) = match (&args.config, &args.policy) {
        (Some(file), _) => match deployment(file) {
            Ok(loaded) => loaded,
            Err(e) => return fail(e),
        },
        (None, Some(p)) => match crate::cmd::policy::load(p) {
            Ok(p) => (p, App::Desk),
            Err(code) => return code,
        },
        (None, None) => match Policy::load(desk::POLICY) {
            Ok(p) => (p, App::Desk),
            Err(e) => return fail(format!("built-in policy: {e}")),
        },
    };
    let policy = Arc::new(policy);
    let runtime = match crate::io::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("starting the async runtime: {e}")),
    };
    let suite = args.path.display().to_string();
    let outcome = if args.live {
        runtime.block_on(live(
            &args,
            &policy,
            &app,
            &cases,
            thresholds.as_ref(),
            &suite,
        ))
    } else {
        let bar = progress(cases.len(), "replaying");
        let done = runtime.block_on(replay(&args.gate, &policy, &app, &cases, &bar));
        bar.finish_and_clear();
        done.map(|(gate, results)| Report::new(&gate, &suite, results, thresholds.as_ref()))
    };
    let report = match outcome {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let text = match args.format.as_str() {
        "json" => report.to_json().to_string(),
        "markdown" => render::markdown(&report),
        "junit" => render::junit(&report),
        _ => render::human(&report),
    };
    if let Err(e) = print_line(text.trim_end()) {
        return fail(format!("writing stdout: {e}"));
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A bar on stderr; indicatif hides it when stderr is not a terminal, so
/// piped and CI output carries no control sequences.
fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// Whose pipeline decides the cases.
enum App {
    /// The support-desk example, seeding its tables from each case.
    Desk,
    /// A deployment file's tools: Cedar over each case's rows, writes in
    /// memory.
    Deployment {
        cedar: String,
        tools: Vec<ToolMapping>,
    },
}

/// The policy and the tools' mappings of the deployment file at `path`,
/// loaded as `serve --config` loads them but without connecting to
/// anything or reading a secret.
fn deployment(path: &Path) -> Result<(Policy, App), String> {
    let file = config::load(path).map_err(|e| e.to_string())?;
    let section = match file.application {
        Application::BuiltIn => return Ok((file.policy, App::Desk)),
        Application::Tools(section) => section,
    };
    let err = |field: String, m: String| format!("{}: {field}: {m}", path.display());
    let mut tools = Vec::with_capacity(section.tools.len());
    for t in &section.tools {
        if file.policy.tool(&t.name).is_none() {
            return Err(err(
                format!("tools[{}].name", t.name),
                "no such tool in the policy".to_owned(),
            ));
        }
        tools.push(ToolMapping {
            tool: t.name.clone(),
            mapping: Mapping {
                principal_type: t.cedar.principal_type.clone(),
                resource_type: t.cedar.resource_type.clone(),
                resource_field: t.cedar.resource_field.clone(),
            },
            entity_types: t
                .entities
                .iter()
                .map(|e| e.type_name().to_owned())
                .collect(),
            reads_state: !matches!(t.state, StateConfig::None),
        });
    }
    for contract in file.policy.tools() {
        if !tools.iter().any(|t| t.tool == contract.name()) {
            return Err(err(
                "tools".to_owned(),
                format!(
                    "the policy tool `{}` has no [[tools]] entry",
                    contract.name()
                ),
            ));
        }
    }
    Ok((
        file.policy,
        App::Deployment {
            cedar: file.cedar,
            tools,
        },
    ))
}

/// How long an evaluation's claim may run: cases are decided one at a
/// time and complete at once, so this only has to outlast one decision.
const LEASE: Duration = Duration::from_secs(30);

/// Runs `cases` through `app`'s service (the decision every door makes)
/// under `policy`, on a fresh claim store in `scratch`, calling `each`
/// after every case.
async fn with_gate(
    app: &App,
    policy: &Arc<Policy>,
    scratch: &Scratch,
    cases: &[Case],
    each: impl FnMut(&CaseResult),
) -> Result<Vec<CaseResult>, String> {
    let results = match app {
        App::Desk => {
            let desk = desk::Desk::open(&scratch.sqlite_url("eval.db")).await?;
            let service = desk.service(Arc::clone(policy))?;
            let gate = ServiceGate {
                service: &service,
                seeder: &desk,
            };
            toolgate_eval::run(&gate, cases, each).await
        }
        App::Deployment { cedar, tools } => {
            let url = scratch.sqlite_url("eval.db");
            let claims = AnyClaimStore::connect(&url)
                .await
                .map_err(|e| format!("opening {url}: {e}"))?;
            let deployment = DeploymentUnderTest::new(cedar, tools)?;
            let settings = toolgate_service::Settings {
                lease: LEASE,
                ..toolgate_service::Settings::default()
            };
            // Cases name their actor themselves: no caller authenticates.
            let service = Service::new(
                Arc::clone(policy),
                deployment.components(claims),
                KeyRing::default(),
                settings,
            );
            let gate = ServiceGate {
                service: &service,
                seeder: &deployment,
            };
            toolgate_eval::run(&gate, cases, each).await
        }
    };
    results.map_err(|e| e.to_string())
}

async fn replay(
    gate: &str,
    policy: &Arc<Policy>,
    app: &App,
    cases: &[Case],
    bar: &ProgressBar,
) -> Result<(String, Vec<CaseResult>), String> {
    let tick = |_: &CaseResult| bar.inc(1);
    if gate == "refuse-all" {
        let results = toolgate_eval::run(&RefuseAll, cases, tick)
            .await
            .map_err(|e| e.to_string())?;
        return Ok((RefuseAll.name().to_owned(), results));
    }
    let scratch = Scratch::new("eval").map_err(|e| format!("scratch directory: {e}"))?;
    let results = with_gate(app, policy, &scratch, cases, tick).await?;
    Ok(("toolgate".to_owned(), results))
}

async fn live(
    args: &Args,
    policy: &Arc<Policy>,
    app: &App,
    cases: &[Case],
    thresholds: Option<&Thresholds>,
    suite: &str,
) -> Result<Report, String> {
    let provider = args
        .provider
        .as_deref()
        .and_then(Provider::from_name)
        .ok_or("--provider is required with --live")?;
    let config = LiveConfig {
        provider,
        base_url: args.base_url.clone().ok_or("--base-url is required")?,
        model: args.model.clone().ok_or("--model is required")?,
        api_key: std::env::var("TOOLGATE_EVAL_API_KEY").ok(),
        max_tokens: args.max_tokens,
        max_response_bytes: policy.body_max_bytes() as u64 + 1,
        timeout: Duration::from_secs(args.timeout),
        instructions: read_instructions(&thresholds_dir(&args.path))?,
    };
    if !(config.base_url.starts_with("https://") || config.base_url.starts_with("http://")) {
        return Err("--base-url must be https://HOST or http://HOST:PORT (a local gateway)".into());
    }
    if let Some(dir) = &args.record {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // The recorded suite replays, and runs live again, as this one.
        for name in [
            toolgate_eval::metrics::THRESHOLDS_FILE,
            toolgate_eval::live::INSTRUCTIONS_FILE,
        ] {
            let src = thresholds_dir(&args.path).join(name);
            if src.is_file() {
                std::fs::copy(&src, dir.join(name))
                    .map_err(|e| format!("copying {}: {e}", src.display()))?;
            }
        }
    }
    let client = Client::new(&config)?;
    let k = args.repeat;
    let bar = progress(cases.len() * k as usize, "asking");
    let mut all = Vec::new();
    let mut passed_every = vec![true; cases.len()];
    for trial in 1..=k {
        // Each trial starts from a fresh database: the same case's
        // operation key would otherwise replay the previous trial's write.
        let scratch = Scratch::new("eval").map_err(|e| format!("scratch directory: {e}"))?;
        let mut recorded = String::new();
        let mut live_cases = Vec::with_capacity(cases.len());
        for case in cases {
            let request = request_for(&config, policy, case);
            let body = client
                .send(&request)
                .await
                .map_err(|e| format!("case {}: {e}", case.id))?;
            let live_case = case_as(case, provider, &body);
            recorded.push_str(&live_case.to_json_line(&body));
            recorded.push('\n');
            live_cases.push(live_case);
            bar.inc(1);
        }
        // The trial's responses are decided once all are in: a decision
        // never changes what the model is asked.
        let results = with_gate(app, policy, &scratch, &live_cases, |_| {}).await?;
        for (i, mut result) in results.into_iter().enumerate() {
            passed_every[i] &= result.as_expected();
            if k > 1 {
                result.id = format!("{}#{trial}", result.id);
            }
            all.push(result);
        }
        if let Some(dir) = &args.record {
            let file = dir.join(format!("trial-{trial}.jsonl"));
            std::fs::write(&file, recorded).map_err(|e| format!("{}: {e}", file.display()))?;
        }
    }
    bar.finish_and_clear();
    let mut report = Report::new("toolgate", suite, all, thresholds);
    let passed = passed_every.iter().filter(|p| **p).count();
    report.pass_k = Some(PassK {
        k,
        passed: u32::try_from(passed).unwrap_or(u32::MAX),
        cases: u32::try_from(cases.len()).unwrap_or(u32::MAX),
    });
    Ok(report)
}

/// The suite's instructions for the model, if it has an instructions file.
fn read_instructions(dir: &Path) -> Result<Option<String>, String> {
    let path = dir.join(toolgate_eval::live::INSTRUCTIONS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The case with a live response: the provider that answered, native tool
/// calls (the request declared the tools), no stream.
fn case_as(case: &Case, provider: Provider, body: &[u8]) -> Case {
    let mut c = case.clone();
    c.provider = provider;
    c.stream = false;
    c.structured = false;
    c.response = body.to_vec();
    c
}
