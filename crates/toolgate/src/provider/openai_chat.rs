//! OpenAI Chat Completions: `choices[0].message`, `finish_reason`, and
//! `tool_calls[].function.arguments` as a JSON string.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::sse::Event;
use super::{
    ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, malformed, object,
    opt_str, req_str,
};

fn classify(finish_reason: Option<&str>, refusal: Option<&str>) -> Stop {
    // An explicit refusal wins over any finish reason: it is terminal and
    // must never be retried as a parse error.
    if let Some(r) = refusal {
        let mut stop = Stop::new(StopClass::Refused, finish_reason.map(str::to_owned));
        stop.explanation = Some(r.to_owned());
        return stop;
    }
    let class = match finish_reason {
        Some("stop") => StopClass::Complete,
        Some("tool_calls") => StopClass::ToolUse,
        Some("length") => StopClass::Truncated,
        Some("content_filter") => StopClass::ContentFiltered,
        // `function_call` (the deprecated single-function form) and anything
        // newer fail closed.
        _ => StopClass::Unknown,
    };
    Stop::new(class, finish_reason.map(str::to_owned))
}

/// The single choice toolgate gates: `n > 1` is several proposals at once.
fn only_choice<'a>(body: &'a Map<String, Value>, p: &str) -> Result<&'a Value, ProviderError> {
    let choices = array(
        body.get("choices")
            .ok_or_else(|| malformed(&format!("{p}/choices"), "missing"))?,
        &format!("{p}/choices"),
    )?;
    match choices.as_slice() {
        [one] => Ok(one),
        _ => Err(malformed(
            &format!("{p}/choices"),
            format!("expected exactly one choice, got {}", choices.len()),
        )),
    }
}

/// A complete (non-stream) chat completion.
pub(super) fn parse(body: &Value) -> Result<Turn, ProviderError> {
    let body = object(body, "")?;
    let choice = object(only_choice(body, "")?, "/choices/0")?;
    let finish = opt_str(choice, "finish_reason", "/choices/0")?;
    let mp = "/choices/0/message";
    let message = object(
        choice
            .get("message")
            .ok_or_else(|| malformed(mp, "missing"))?,
        mp,
    )?;
    let refusal = opt_str(message, "refusal", mp)?;
    let stop = classify(finish, refusal);
    let text = opt_str(message, "content", mp)?.unwrap_or("").to_owned();
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|v| !v.is_null()) {
        let tp = format!("{mp}/tool_calls");
        for (i, call) in array(calls, &tp)?.iter().enumerate() {
            let cp = format!("{tp}/{i}");
            let call = object(call, &cp)?;
            let kind = opt_str(call, "type", &cp)?.unwrap_or("function");
            if kind != "function" {
                return Err(malformed(
                    &format!("{cp}/type"),
                    format!("tool call type {kind:?} is not supported"),
                ));
            }
            let fp = format!("{cp}/function");
            let function = object(
                call.get("function")
                    .ok_or_else(|| malformed(&fp, "missing"))?,
                &fp,
            )?;
            tool_calls.push(RawToolCall {
                name: req_str(function, "name", &fp)?.to_owned(),
                id: opt_str(call, "id", &cp)?.map(str::to_owned),
                arguments: RawArguments::Text(req_str(function, "arguments", &fp)?.to_owned()),
            });
        }
    }
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}

#[derive(Default)]
struct StreamCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// A chat completion stream: `chat.completion.chunk` events whose `delta`s
/// add content, refusal text and tool-call fragments (keyed by `index`),
/// the last one carrying `finish_reason`, then `[DONE]`.
pub(super) fn parse_stream(events: &[Event]) -> Result<Turn, ProviderError> {
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut finish: Option<String> = None;
    let mut done = false;
    let mut calls: BTreeMap<u64, StreamCall> = BTreeMap::new();
    for (n, ev) in events.iter().enumerate() {
        let p = format!("/events/{n}");
        let Some(data) = &ev.data else {
            done = true;
            continue;
        };
        let chunk = object(data, &p)?;
        if let Some(err) = chunk.get("error") {
            let mut stop = Stop::new(StopClass::Unknown, Some("error".to_owned()));
            stop.explanation = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return Ok(Turn {
                text: String::new(),
                tool_calls: Vec::new(),
                stop,
            });
        }
        let choices = match chunk.get("choices") {
            Some(c) => array(c, &format!("{p}/choices"))?,
            None => continue,
        };
        for (ci, choice) in choices.iter().enumerate() {
            let cp = format!("{p}/choices/{ci}");
            let choice = object(choice, &cp)?;
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                return Err(malformed(
                    &format!("{cp}/index"),
                    "expected exactly one choice (index 0)",
                ));
            }
            if let Some(f) = opt_str(choice, "finish_reason", &cp)? {
                finish = Some(f.to_owned());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            let dp = format!("{cp}/delta");
            let delta = object(delta, &dp)?;
            if let Some(c) = opt_str(delta, "content", &dp)? {
                text.push_str(c);
            }
            if let Some(r) = opt_str(delta, "refusal", &dp)? {
                refusal.get_or_insert_with(String::new).push_str(r);
            }
            if let Some(tcs) = delta.get("tool_calls").filter(|v| !v.is_null()) {
                let tp = format!("{dp}/tool_calls");
                for (ti, tc) in array(tcs, &tp)?.iter().enumerate() {
                    let tcp = format!("{tp}/{ti}");
                    let tc = object(tc, &tcp)?;
                    let index = tc
                        .get("index")
                        .and_then(Value::as_u64)
                        .ok_or_else(|| malformed(&format!("{tcp}/index"), "missing index"))?;
                    let entry = calls.entry(index).or_default();
                    if let Some(id) = opt_str(tc, "id", &tcp)? {
                        entry.id = Some(id.to_owned());
                    }
                    if let Some(f) = tc.get("function") {
                        let fp = format!("{tcp}/function");
                        let f = object(f, &fp)?;
                        if let Some(name) = opt_str(f, "name", &fp)? {
                            entry.name.push_str(name);
                        }
                        if let Some(args) = opt_str(f, "arguments", &fp)? {
                            entry.arguments.push_str(args);
                        }
                    }
                }
            }
        }
    }
    let mut stop = classify(finish.as_deref(), refusal.as_deref());
    if (!done || finish.is_none()) && stop.class != StopClass::Refused {
        // No finish reason or no `[DONE]`: the stream was cut.
        if stop.class != StopClass::Truncated {
            stop = Stop::new(StopClass::Truncated, Some("stream_cut".to_owned()));
        }
    }
    let tool_calls = calls
        .into_values()
        .map(|c| RawToolCall {
            name: c.name,
            id: c.id,
            arguments: RawArguments::Text(c.arguments),
        })
        .collect();
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}
