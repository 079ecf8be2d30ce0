//! Gemini `generateContent`: `candidates[0].content.parts`, `finishReason`,
//! `promptFeedback.blockReason`.

use std::borrow::Cow;

use super::{
    At, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, field, fields,
    malformed, object, push_text, raw_stop,
};
use crate::decode::Json;

fn classify(reason: Option<&str>, has_calls: bool) -> StopClass {
    match reason {
        // Gemini reports STOP for function calls too.
        Some("STOP") if has_calls => StopClass::ToolUse,
        Some("STOP") => StopClass::Complete,
        Some("MAX_TOKENS") => StopClass::Truncated,
        Some(
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY",
        ) => StopClass::ContentFiltered,
        // MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, LANGUAGE, OTHER,
        // FINISH_REASON_UNSPECIFIED and anything newer fail closed.
        _ => StopClass::Unknown,
    }
}

pub(super) fn parse<'t>(body: Json<'t>) -> Result<Turn<'t>, ProviderError> {
    let root = At::ROOT;
    let resp = object(body, root)?;
    let [feedback, candidates] = fields(resp, ["promptFeedback", "candidates"]);
    // A blocked prompt has no candidates, only the block reason.
    let fbp = root.key("promptFeedback");
    if let Some(fb) = feedback.get().and_then(|v| v.as_object()) {
        let [block, message] = fields(fb, ["blockReason", "blockReasonMessage"]);
        if let Some(block) = block.opt_str(fbp)? {
            let mut stop = Stop::new(
                StopClass::ContentFiltered,
                Some(format!("promptFeedback.blockReason:{block}").into()),
            );
            stop.category = Some(block.to_owned());
            stop.explanation = message.opt_str(fbp)?.map(str::to_owned);
            return Ok(Turn::stopped(stop));
        }
    }
    let cands = root.key("candidates");
    let candidates = array(candidates.required(root)?, cands)?;
    let (Some(candidate), 1) = (candidates.get(0), candidates.len()) else {
        return Err(malformed(
            cands,
            format!("expected exactly one candidate, got {}", candidates.len()),
        ));
    };
    let cp = cands.index(0);
    let candidate = object(candidate, cp)?;
    // `finishMessage` is read only for an unknown stop, below.
    let [reason, content] = fields(candidate, ["finishReason", "content"]);
    let reason = reason.opt_str(cp)?;
    let mut text = Cow::Borrowed("");
    let mut tool_calls = Vec::new();
    // A filtered candidate may have no content at all.
    if let Some(content) = content.get() {
        let content_at = cp.key("content");
        let content = object(content, content_at)?;
        let pp = content_at.key("parts");
        let parts = match content.get("parts") {
            Some(parts) => Some(array(parts, pp)?),
            None => None,
        };
        for (i, part) in parts.iter().flat_map(|p| p.iter()).enumerate() {
            let p = pp.index(i);
            let part = object(part, p)?;
            let [thought, part_text, call, signature] = fields(
                part,
                ["thought", "text", "functionCall", "thoughtSignature"],
            );
            if thought.get().and_then(|v| v.as_bool()) == Some(true) {
                continue;
            }
            if let Some(t) = part_text.opt_str(p)? {
                push_text(&mut text, t);
            } else if let Some(call) = call.get() {
                let fp = p.key("functionCall");
                let call = object(call, fp)?;
                let [name, id, args] = fields(call, ["name", "id", "args"]);
                tool_calls.push(RawToolCall {
                    name: Cow::Borrowed(name.req_str(fp)?),
                    id: id.opt_str(fp)?.map(Cow::Borrowed),
                    // No `args` means a call without arguments.
                    arguments: match args.get() {
                        Some(args) => RawArguments::Value(args),
                        None => {
                            RawArguments::Implied(serde_json::Value::Object(Default::default()))
                        }
                    },
                });
            } else if signature.get().is_some() {
                // A signature-only part carries no content.
            } else {
                return Err(malformed(p, "part kind is not supported"));
            }
        }
    }
    let mut stop = Stop::new(
        classify(reason, !tool_calls.is_empty()),
        reason.map(raw_stop),
    );
    if stop.class == StopClass::ContentFiltered {
        stop.category = reason.map(str::to_owned);
    }
    if stop.class == StopClass::Unknown {
        stop.explanation = field(candidate, "finishMessage")
            .opt_str(cp)?
            .map(str::to_owned);
    }
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}
