//! OpenAI Chat Completions: `choices[0].message`, `finish_reason`, and
//! `tool_calls[].function.arguments` as a JSON string.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::sse::Event;
use super::{
    At, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, field, fields,
    malformed, member, object, raw_stop,
};
use crate::decode::{Json, Object};

fn classify(finish_reason: Option<&str>, refusal: Option<&str>) -> Stop {
    // An explicit refusal wins over any finish reason: it is terminal and
    // must never be retried as a parse error.
    if let Some(r) = refusal {
        let mut stop = Stop::new(StopClass::Refused, finish_reason.map(raw_stop));
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
    Stop::new(class, finish_reason.map(raw_stop))
}

/// The single choice toolgate gates: `n > 1` is several proposals at once.
fn only_choice<'t>(body: Object<'t>, at: At<'_>) -> Result<Json<'t>, ProviderError> {
    let choices = array(member(body, "choices", at)?, at.key("choices"))?;
    match choices.get(0) {
        Some(one) if choices.len() == 1 => Ok(one),
        _ => Err(malformed(
            at.key("choices"),
            format!("expected exactly one choice, got {}", choices.len()),
        )),
    }
}

/// A complete (non-stream) chat completion.
pub(super) fn parse<'t>(body: Json<'t>) -> Result<Turn<'t>, ProviderError> {
    let root = At::ROOT;
    let body = object(body, root)?;
    let choices = root.key("choices");
    let cp = choices.index(0);
    let choice = object(only_choice(body, root)?, cp)?;
    let [finish, message] = fields(choice, ["finish_reason", "message"]);
    let finish = finish.opt_str(cp)?;
    let mp = cp.key("message");
    let message = object(message.required(cp)?, mp)?;
    let [refusal, content, calls] = fields(message, ["refusal", "content", "tool_calls"]);
    let refusal = refusal.opt_str(mp)?;
    let stop = classify(finish, refusal);
    let text = Cow::Borrowed(content.opt_str(mp)?.unwrap_or(""));
    let mut tool_calls = Vec::new();
    if let Some(calls) = calls.get().filter(|v| !v.is_null()) {
        let tp = mp.key("tool_calls");
        for (i, call) in array(calls, tp)?.iter().enumerate() {
            let cp = tp.index(i);
            let call = object(call, cp)?;
            let [kind, function, id] = fields(call, ["type", "function", "id"]);
            let kind = kind.opt_str(cp)?.unwrap_or("function");
            if kind != "function" {
                return Err(malformed(
                    cp.key("type"),
                    format!("tool call type {kind:?} is not supported"),
                ));
            }
            let fp = cp.key("function");
            let function = object(function.required(cp)?, fp)?;
            let [name, arguments] = fields(function, ["name", "arguments"]);
            tool_calls.push(RawToolCall {
                name: Cow::Borrowed(name.req_str(fp)?),
                id: id.opt_str(cp)?.map(Cow::Borrowed),
                arguments: RawArguments::Text(Cow::Borrowed(arguments.req_str(fp)?)),
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
pub(super) fn parse_stream<'t>(events: &'t [Event<'t>]) -> Result<Turn<'t>, ProviderError> {
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut finish: Option<&str> = None;
    let mut done = false;
    let mut calls: BTreeMap<u64, StreamCall> = BTreeMap::new();
    let all = At::ROOT.key("events");
    for (n, ev) in events.iter().enumerate() {
        let p = all.index(n);
        let Some(data) = &ev.data else {
            done = true;
            continue;
        };
        let chunk = object(data.root(), p)?;
        if let Some(err) = chunk.get("error") {
            let mut stop = Stop::new(StopClass::Unknown, Some("error".into()));
            stop.explanation = err
                .get("message")
                .and_then(|v| v.as_str())
                .map(str::to_owned);
            return Ok(Turn::stopped(stop));
        }
        let choices = match chunk.get("choices") {
            Some(c) => array(c, p.key("choices"))?,
            None => continue,
        };
        let cps = p.key("choices");
        for (ci, choice) in choices.iter().enumerate() {
            let cp = cps.index(ci);
            let choice = object(choice, cp)?;
            if choice.get("index").and_then(|v| v.as_u64()).unwrap_or(0) != 0 {
                return Err(malformed(
                    cp.key("index"),
                    "expected exactly one choice (index 0)",
                ));
            }
            if let Some(f) = field(choice, "finish_reason").opt_str(cp)? {
                finish = Some(f);
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            let dp = cp.key("delta");
            let delta = object(delta, dp)?;
            if let Some(c) = field(delta, "content").opt_str(dp)? {
                text.push_str(c);
            }
            if let Some(r) = field(delta, "refusal").opt_str(dp)? {
                refusal.get_or_insert_with(String::new).push_str(r);
            }
            if let Some(tcs) = delta.get("tool_calls").filter(|v| !v.is_null()) {
                let tp = dp.key("tool_calls");
                for (ti, tc) in array(tcs, tp)?.iter().enumerate() {
                    let tcp = tp.index(ti);
                    let tc = object(tc, tcp)?;
                    let index = tc
                        .get("index")
                        .and_then(|v| v.as_u64())
                        .ok_or_else(|| malformed(tcp.key("index"), "missing index"))?;
                    let entry = calls.entry(index).or_default();
                    if let Some(id) = field(tc, "id").opt_str(tcp)? {
                        entry.id = Some(id.to_owned());
                    }
                    if let Some(f) = tc.get("function") {
                        let fp = tcp.key("function");
                        let f = object(f, fp)?;
                        if let Some(name) = field(f, "name").opt_str(fp)? {
                            entry.name.push_str(name);
                        }
                        if let Some(args) = field(f, "arguments").opt_str(fp)? {
                            entry.arguments.push_str(args);
                        }
                    }
                }
            }
        }
    }
    let mut stop = classify(finish, refusal.as_deref());
    if (!done || finish.is_none()) && stop.class != StopClass::Refused {
        // No finish reason or no `[DONE]`: the stream was cut.
        if stop.class != StopClass::Truncated {
            stop = Stop::new(StopClass::Truncated, Some("stream_cut".into()));
        }
    }
    let tool_calls = calls
        .into_values()
        .map(|c| RawToolCall {
            name: Cow::Owned(c.name),
            id: c.id.map(Cow::Owned),
            arguments: RawArguments::Text(Cow::Owned(c.arguments)),
        })
        .collect();
    Ok(Turn {
        text: Cow::Owned(text),
        tool_calls,
        stop,
    })
}
