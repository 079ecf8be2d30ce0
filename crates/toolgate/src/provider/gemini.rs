//! Gemini `generateContent`: `candidates[0].content.parts`, `finishReason`,
//! `promptFeedback.blockReason`.

use serde_json::Value;

use super::{
    ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn, array, malformed, object,
    opt_str, req_str,
};

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

pub(super) fn parse(body: &Value) -> Result<Turn, ProviderError> {
    let resp = object(body, "")?;
    // A blocked prompt has no candidates, only the block reason.
    if let Some(fb) = resp.get("promptFeedback").and_then(Value::as_object)
        && let Some(block) = opt_str(fb, "blockReason", "/promptFeedback")?
    {
        let mut stop = Stop::new(
            StopClass::ContentFiltered,
            Some(format!("promptFeedback.blockReason:{block}")),
        );
        stop.category = Some(block.to_owned());
        stop.explanation = opt_str(fb, "blockReasonMessage", "/promptFeedback")?.map(str::to_owned);
        return Ok(Turn {
            text: String::new(),
            tool_calls: Vec::new(),
            stop,
        });
    }
    let candidates = array(
        resp.get("candidates")
            .ok_or_else(|| malformed("/candidates", "missing"))?,
        "/candidates",
    )?;
    let [candidate] = candidates.as_slice() else {
        return Err(malformed(
            "/candidates",
            format!("expected exactly one candidate, got {}", candidates.len()),
        ));
    };
    let cp = "/candidates/0";
    let candidate = object(candidate, cp)?;
    let reason = opt_str(candidate, "finishReason", cp)?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    // A filtered candidate may have no content at all.
    if let Some(content) = candidate.get("content") {
        let content = object(content, &format!("{cp}/content"))?;
        let pp = format!("{cp}/content/parts");
        let parts = match content.get("parts") {
            Some(parts) => array(parts, &pp)?.as_slice(),
            None => &[],
        };
        for (i, part) in parts.iter().enumerate() {
            let p = format!("{pp}/{i}");
            let part = object(part, &p)?;
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = opt_str(part, "text", &p)? {
                text.push_str(t);
            } else if let Some(call) = part.get("functionCall") {
                let fp = format!("{p}/functionCall");
                let call = object(call, &fp)?;
                tool_calls.push(RawToolCall {
                    name: req_str(call, "name", &fp)?.to_owned(),
                    id: opt_str(call, "id", &fp)?.map(str::to_owned),
                    // No `args` means a call without arguments.
                    arguments: RawArguments::Value(
                        call.get("args")
                            .cloned()
                            .unwrap_or_else(|| Value::Object(Default::default())),
                    ),
                });
            } else if part.contains_key("thoughtSignature") {
                // A signature-only part carries no content.
            } else {
                return Err(malformed(&p, "part kind is not supported"));
            }
        }
    }
    let mut stop = Stop::new(
        classify(reason, !tool_calls.is_empty()),
        reason.map(str::to_owned),
    );
    if stop.class == StopClass::ContentFiltered {
        stop.category = reason.map(str::to_owned);
    }
    if stop.class == StopClass::Unknown {
        stop.explanation = opt_str(candidate, "finishMessage", cp)?.map(str::to_owned);
    }
    Ok(Turn {
        text,
        tool_calls,
        stop,
    })
}
