//! `toolgate bench decode`: the strict decoder against plain
//! `serde_json::from_slice::<Value>` on the same bytes.

use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::decode::{Limits, decode_strict};

use super::timing::compare;

/// Strict decoder throughput against serde_json, and peak memory.
///
/// For three documents (a ~400-byte action envelope, a ~2 KB tool input and
/// a ~200 KB provider-style body) prints one line each:
///   doc=<name> bytes=<n> strict_mb_s=<x> serde_json_mb_s=<y> ratio=<strict time / serde_json time>
/// then the peak heap growth while decoding a 10 MB document, for both,
/// measured in a child process from the kernel's peak-RSS counter.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Seconds to spend measuring each document.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Size in MB of the peak-memory document (0 skips the measurement).
    #[arg(long, default_value_t = 10)]
    peak_mb: usize,
    /// Internal: measure one decoder's peak on a file, print it, exit.
    #[arg(long, hide = true, value_names = ["DECODER", "FILE"], num_args = 2)]
    peak_child: Option<Vec<String>>,
}

#[expect(
    clippy::disallowed_methods,
    reason = "serde_json is the baseline the benchmark compares the strict decoder with"
)]
pub fn run(args: Args) -> ExitCode {
    if let Some(child) = &args.peak_child {
        return peak_child(&child[0], &child[1]);
    }
    if !args.seconds.is_finite() || args.seconds <= 0.0 {
        eprintln!("toolgate bench decode: --seconds must be positive");
        return ExitCode::from(2);
    }
    let budget = Duration::from_secs_f64(args.seconds);
    for (name, doc) in [
        ("envelope", envelope()),
        ("tool_input", tool_input()),
        ("large", large(200 * 1024)),
    ] {
        let limits = Limits::provider_body().with_max_bytes(doc.len());
        // Both must agree on the bytes before their speed is worth comparing.
        let strict = decode_strict(&doc, &limits).expect("bench document is strict JSON");
        let plain: Value = serde_json::from_slice(&doc).expect("bench document is JSON");
        assert_eq!(strict, plain, "decoders disagree on {name}");
        let [s, p] = compare(
            budget,
            [
                &mut || {
                    black_box(decode_strict(black_box(&doc), &limits).ok());
                },
                &mut || {
                    black_box(serde_json::from_slice::<Value>(black_box(&doc)).ok());
                },
            ],
        );
        let mb = doc.len() as f64 / 1e6;
        println!(
            "doc={name} bytes={} strict_mb_s={:.1} serde_json_mb_s={:.1} ratio={:.3}",
            doc.len(),
            mb / s,
            mb / p,
            s / p
        );
    }
    if args.peak_mb > 0 {
        return peak(args.peak_mb);
    }
    ExitCode::SUCCESS
}

fn peak(mb: usize) -> ExitCode {
    for (name, doc) in [
        ("large", large(mb * 1024 * 1024)),
        // The worst case for a tree of `Value`s: two input bytes per value.
        ("zeros", zeros(mb * 1024 * 1024)),
    ] {
        if let Some(code) = peak_of(name, &doc) {
            return code;
        }
    }
    ExitCode::SUCCESS
}

/// Measures one document in child processes; `Some` on failure.
fn peak_of(name: &str, doc: &[u8]) -> Option<ExitCode> {
    let path =
        std::env::temp_dir().join(format!("toolgate-bench-peak-{}.json", std::process::id()));
    if let Err(e) = std::fs::write(&path, doc) {
        eprintln!("toolgate bench decode: writing {}: {e}", path.display());
        return Some(ExitCode::from(2));
    }
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("toolgate bench decode: cannot find own executable");
        return Some(ExitCode::from(2));
    };
    let mut figures = Vec::new();
    for decoder in ["strict", "serde_json"] {
        let out = Command::new(&exe)
            .args(["bench", "decode", "--peak-child", decoder])
            .arg(&path)
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                match text.trim().parse::<u64>() {
                    Ok(kb) => figures.push(kb),
                    Err(_) => {
                        eprintln!("toolgate bench decode: peak child printed {text:?}");
                    }
                }
            }
            Ok(o) => eprintln!(
                "toolgate bench decode: peak child failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("toolgate bench decode: peak child: {e}"),
        }
    }
    let _ = std::fs::remove_file(&path);
    let [strict, plain] = figures[..] else {
        return Some(ExitCode::from(2));
    };
    let input_mb = doc.len() as f64 / 1e6;
    println!(
        "peak doc={name} bytes={} strict_peak_mb={:.1} serde_json_peak_mb={:.1} strict_per_input_byte={:.2} ratio={:.3}",
        doc.len(),
        strict as f64 / 1e3,
        plain as f64 / 1e3,
        strict as f64 / 1e3 / input_mb,
        strict as f64 / plain.max(1) as f64
    );
    None
}

/// Prints the growth of peak RSS (kB) caused by decoding the file.
#[expect(
    clippy::disallowed_methods,
    reason = "serde_json is the baseline the benchmark compares the strict decoder with"
)]
fn peak_child(decoder: &str, file: &str) -> ExitCode {
    let Ok(doc) = std::fs::read(file) else {
        return ExitCode::from(2);
    };
    // Reset the high-water mark so that reading the file does not count.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let Some(before) = status_kb("VmRSS") else {
        eprintln!("no /proc/self/status: peak memory is measured on Linux only");
        return ExitCode::from(2);
    };
    let ok = match decoder {
        "strict" => decode_strict(&doc, &Limits::provider_body().with_max_bytes(doc.len()))
            .map(black_box)
            .is_ok(),
        _ => serde_json::from_slice::<Value>(&doc).map(black_box).is_ok(),
    };
    let after = status_kb("VmHWM").unwrap_or(0);
    if !ok {
        return ExitCode::from(2);
    }
    println!("{}", after.saturating_sub(before));
    ExitCode::SUCCESS
}

fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `[0,0,0,…]` of about `target` bytes.
pub fn zeros(target: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target + 2);
    out.push(b'[');
    while out.len() < target {
        out.extend_from_slice(b"0,");
    }
    out.extend_from_slice(b"0]");
    out
}

/// A ~400-byte action envelope, as a model returns it (the seed of
/// `fixtures/bench/`).
pub fn envelope() -> Vec<u8> {
    include_bytes!("../../../../../fixtures/bench/envelope.json").to_vec()
}

/// A ~2 KB tool input: mixed scalars, nested objects and a list.
pub fn tool_input() -> Vec<u8> {
    let lines: Vec<Value> = (0..20)
        .map(|i| {
            json!({
                "sku": format!("SKU-{:05}", 1000 + i * 37),
                "quantity": i % 4 + 1,
                "unit_price_minor": 1299 + i * 100,
                "discount": 0.05 * f64::from(i % 3),
                "gift": i % 5 == 0,
            })
        })
        .collect();
    json!({
        "order_id": "ord_01HZX8M4Q2VJ7K9T3B6N",
        "customer": {"id": "cus_4242", "tier": "gold", "locale": "fr-FR", "note": null},
        "lines": lines,
        "shipping": {"method": "express", "address": {"city": "Zürich", "postcode": "8001"}},
        "reason": "Le client signale un retard de livraison \u{e9}l\u{e9}ment \"urgent\".",
    })
    .to_string()
    .into_bytes()
}

/// A provider-style body of about `target` bytes: a list of message-like
/// records with text, numbers, escapes and nesting.
pub fn large(target: usize) -> Vec<u8> {
    let mut out = String::with_capacity(target + 512);
    out.push_str(r#"{"object":"list","data":["#);
    let mut i = 0u64;
    while out.len() < target {
        if i > 0 {
            out.push(',');
        }
        let record = json!({
            "id": format!("msg_{i:08}"),
            "role": if i.is_multiple_of(2) { "user" } else { "assistant" },
            "created": 1_700_000_000 + i,
            "score": (i as f64) / 7.0,
            "content": [{"type": "text", "text": format!(
                "Message {i}: the parcel \"{}\" was delayed; caf\u{e9} \u{2713} line\nbreak", i * 31
            )}],
            "usage": {"input_tokens": 120 + i % 50, "output_tokens": 40 + i % 9},
            "tags": ["support", "billing", "fr"],
            "flagged": false,
        });
        out.push_str(&record.to_string());
        i += 1;
    }
    out.push_str("]}");
    out.into_bytes()
}
