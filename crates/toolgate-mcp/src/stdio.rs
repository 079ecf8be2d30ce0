//! The gateway on a newline-delimited stream (stdio, for local hosts),
//! with every line checked by the core's strict decoder before rmcp reads
//! it, as `/mcp` does with each POST body.
//!
//! rmcp serves the gateway on a pair of in-memory pipes. One task reads the
//! real input line by line (each at most `max_line` bytes): a line the
//! strict decoder accepts goes on to rmcp unchanged, any other is answered
//! with a JSON-RPC parse error (`-32700`, `id: null`). One task writes the
//! real output: rmcp's messages and those errors, a whole line at a time,
//! so the two never interleave inside a message.

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::mpsc;

use rmcp::ServiceExt;
use toolgate::decode::{Limits, decode_strict};

use crate::gateway::Gateway;
use crate::wire::Decide;

/// Serves `gateway` on `input`/`output` until the input ends.
pub async fn serve_lines<D, R, W>(
    gateway: Gateway<D>,
    input: R,
    output: W,
    max_line: usize,
) -> std::io::Result<()>
where
    D: Decide,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_rmcp, rmcp_in) = tokio::io::duplex(64 * 1024);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(64 * 1024);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(64);

    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(line) = lines_rx.recv().await {
            output.write_all(&line).await?;
            output.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });

    let from_rmcp_tx = lines_tx.clone();
    let forward = tokio::spawn(async move {
        let mut from_rmcp = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        loop {
            line.clear();
            if from_rmcp.read_until(b'\n', &mut line).await? == 0 {
                return Ok::<(), std::io::Error>(());
            }
            if from_rmcp_tx.send(line.clone()).await.is_err() {
                return Ok(());
            }
        }
    });

    let reader = tokio::spawn(async move {
        let mut input = BufReader::new(input);
        let limits = Limits::provider_body().with_max_bytes(max_line);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut input)
                .take(max_line as u64 + 1)
                .read_until(b'\n', &mut line)
                .await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            if line.last() != Some(&b'\n') && line.len() > max_line {
                // Over the limit: drop the rest of the line as it arrives,
                // never holding it, and answer once.
                skip_line(&mut input).await?;
                let _ = lines_tx
                    .send(parse_error(&format!(
                        "the message is over {max_line} bytes"
                    )))
                    .await;
                continue;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match decode_strict(text, &limits) {
                Ok(_) => {
                    to_rmcp.write_all(text).await?;
                    to_rmcp.write_all(b"\n").await?;
                }
                Err(r) => {
                    let _ = lines_tx.send(parse_error(&r.to_string())).await;
                }
            }
        }
    });

    let service = gateway
        .serve((rmcp_in, rmcp_out))
        .await
        .map_err(std::io::Error::other)?;
    // When the input ends the reader task drops its end of rmcp's input
    // pipe, and rmcp stops by itself once it has read everything; a
    // decision already started runs to its end on its own task either way
    // (`Gateway::call_tool`).
    let reading = reader.await.map_err(std::io::Error::other);
    let _ = service.waiting().await;
    let _ = forward.await;
    let _ = writer.await;
    reading?
}

/// Consumes input up to and including the next newline (or to the end),
/// a buffer at a time: a line of any length costs no memory.
async fn skip_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

fn parse_error(message: &str) -> Vec<u8> {
    let mut line =
        crate::http::json_rpc_error_body(-32700, &format!("parse error: {message}"), None)
            .into_bytes();
    line.push(b'\n');
    line
}
