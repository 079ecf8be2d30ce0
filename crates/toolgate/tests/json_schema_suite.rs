//! JSON-Schema-Test-Suite, draft 2020-12 required tests, run through the
//! contract layer (`toolgate::contract::Schema`: audit, then the compiled
//! validator with lexical integers).
//!
//! The suite is read from the copy in `fixtures/suites/JSON-Schema-Test-Suite`
//! (provenance in `fixtures/suites/README.md`); a missing suite fails the
//! test, it never skips. Every case where toolgate deliberately differs from
//! the suite is listed below with its reason, and the test asserts the list
//! is exact in both directions: a new difference fails, and so does a listed
//! one that went away.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use toolgate::contract::Schema;
use toolgate::decode::{Limits, decode_strict};

const SUITE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/suites/JSON-Schema-Test-Suite/tests/draft2020-12"
);

/// Test groups whose schema the load-time audit refuses, with the keyword
/// the audit names. Each refusal is deliberate: the audit refuses any
/// `$ref` that is not local (`#…`, so nothing is ever fetched or resolved
/// against another resource), any keyword the validator would ignore, and
/// any dialect other than draft 2020-12.
const REFUSED: &[(&str, &str)] = &[
    // `$ref` to a URI other than a local fragment: remote documents, the
    // meta-schema, or a URI resolved against an `$id`. The audit refuses
    // them all, so resolution never leaves the schema as written.
    (
        "anchor: Location-independent identifier with absolute URI",
        "$ref",
    ),
    (
        "anchor: Location-independent identifier with base URI change in subschema",
        "$ref",
    ),
    ("anchor: same $anchor with different base uri", "$ref"),
    ("defs: validate definition against metaschema", "$ref"),
    (
        "dynamicRef: $dynamicRef avoids the root of each schema, but scopes are still registered",
        "$ref",
    ),
    (
        "dynamicRef: $dynamicRef skips over intermediate resources - direct reference",
        "$ref",
    ),
    (
        "dynamicRef: $ref and $dynamicAnchor are independent of order - $defs first",
        "$ref",
    ),
    (
        "dynamicRef: $ref and $dynamicAnchor are independent of order - $ref first",
        "$ref",
    ),
    (
        "dynamicRef: $ref to $dynamicRef finds detached $dynamicAnchor",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef resolves to the first $dynamicAnchor still in scope that is encountered when the schema is evaluated",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef with a non-matching $dynamicAnchor in the same schema resource behaves like a normal $ref to $anchor",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef with intermediate scopes that don't include a matching $dynamicAnchor does not affect dynamic scope resolution",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef without a matching $dynamicAnchor in the same schema resource behaves like a normal $ref to $anchor",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef without anchor in fragment behaves identical to $ref",
        "$ref",
    ),
    (
        "dynamicRef: An $anchor with the same name as a $dynamicAnchor is not used for dynamic scope resolution",
        "$ref",
    ),
    (
        "dynamicRef: multiple dynamic paths to the $dynamicRef keyword",
        "$ref",
    ),
    (
        "dynamicRef: strict-tree schema, guards against misspelled properties",
        "$ref",
    ),
    (
        "dynamicRef: tests for implementation dynamic anchor and reference link",
        "$ref",
    ),
    (
        "ref: $id must be resolved against nearest parent, not just immediate parent",
        "$ref",
    ),
    ("ref: Recursive references between schemas", "$ref"),
    ("ref: URN base URI with URN and JSON pointer ref", "$ref"),
    ("ref: URN base URI with URN and anchor ref", "$ref"),
    ("ref: URN ref with nested pointer ref", "$ref"),
    ("ref: order of evaluation: $id and $ref", "$ref"),
    (
        "ref: order of evaluation: $id and $ref on nested schema",
        "$ref",
    ),
    ("ref: ref to else", "$ref"),
    ("ref: ref to if", "$ref"),
    ("ref: ref to then", "$ref"),
    ("ref: ref with absolute-path-reference", "$ref"),
    ("ref: refs with relative uris and defs", "$ref"),
    ("ref: relative refs with absolute uris and defs", "$ref"),
    ("ref: remote ref, containing refs itself", "$ref"),
    ("ref: simple URN base URI with $ref via the URN", "$ref"),
    ("refRemote: $ref to $ref finds detached $anchor", "$ref"),
    (
        "refRemote: Location-independent identifier in remote ref",
        "$ref",
    ),
    ("refRemote: anchor within remote ref", "$ref"),
    ("refRemote: base URI change", "$ref"),
    ("refRemote: base URI change - change folder", "$ref"),
    (
        "refRemote: base URI change - change folder in subschema",
        "$ref",
    ),
    ("refRemote: fragment within remote ref", "$ref"),
    ("refRemote: ref within remote ref", "$ref"),
    ("refRemote: remote HTTP ref with different $id", "$ref"),
    ("refRemote: remote HTTP ref with different URN $id", "$ref"),
    (
        "refRemote: remote HTTP ref with nested absolute ref",
        "$ref",
    ),
    ("refRemote: remote ref", "$ref"),
    ("refRemote: remote ref with ref to defs", "$ref"),
    (
        "refRemote: retrieved nested refs resolve relative to their URI not $id",
        "$ref",
    ),
    ("refRemote: root ref in remote ref", "$ref"),
    (
        "unevaluatedItems: unevaluatedItems with $dynamicRef",
        "$ref",
    ),
    (
        "unevaluatedProperties: unevaluatedProperties with $dynamicRef",
        "$ref",
    ),
    // These also hold a non-local `$dynamicRef`; the audit names the first
    // offending keyword in document order (serde_json preserve_order), and
    // here a non-local `$ref` comes first.
    (
        "dynamicRef: A $dynamicRef that initially resolves to a schema with a matching $dynamicAnchor resolves to the first $dynamicAnchor in the dynamic scope",
        "$ref",
    ),
    (
        "dynamicRef: A $dynamicRef that initially resolves to a schema without a matching $dynamicAnchor behaves like a normal $ref to $anchor",
        "$ref",
    ),
    (
        "dynamicRef: after leaving a dynamic scope, it is not used by a $dynamicRef",
        "$ref",
    ),
    // content* keywords are annotations in 2020-12: nothing would be asserted.
    (
        "content: validation of binary string-encoding",
        "contentEncoding",
    ),
    (
        "content: validation of binary-encoded media type documents",
        "contentMediaType",
    ),
    (
        "content: validation of binary-encoded media type documents with schema",
        "contentMediaType",
    ),
    (
        "content: validation of string-encoded content based on media type",
        "contentMediaType",
    ),
    // idn-* formats need the `idna` feature, which is off: unasserted formats
    // are refused rather than silently passed.
    ("format: idn-email format", "format"),
    ("format: idn-hostname format", "format"),
    // Custom meta-schemas (another dialect or vocabulary): only draft 2020-12.
    (
        "vocabulary: ignore unrecognized optional vocabulary",
        "$schema",
    ),
    (
        "vocabulary: schema that uses custom metaschema with with no validation vocabulary",
        "$schema",
    ),
];

/// Single tests where toolgate's verdict differs from the suite's, with the
/// reason: lexical integers (JSON Schema counts `1.0` as an integer,
/// toolgate does not) and asserted formats (the suite's default treats
/// `format` as an annotation; toolgate asserts it, as the contract requires).
const DIFFERENT: &[(&str, &str)] = &[
    (
        "format: date format / invalid date string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: date-time format / invalid date-time string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: duration format / invalid duration string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: email format / invalid email string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: hostname format / invalid hostname string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: ipv4 format / invalid ipv4 string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: ipv6 format / invalid ipv6 string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: iri format / invalid iri string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: iri-reference format / invalid iri-reference string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: json-pointer format / invalid json-pointer string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: regex format / invalid regex string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: relative-json-pointer format / invalid relative-json-pointer string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: time format / invalid time string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: uri format / invalid uri string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: uri-reference format / invalid uri-reference string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: uri-template format / invalid uri-template string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "format: uuid format / invalid uuid string is only an annotation by default",
        "format is asserted, not only an annotation",
    ),
    (
        "type: integer type matches integers / a float with zero fractional part is an integer",
        "lexical integers: 1.0 is not an integer",
    ),
];

#[derive(Default)]
struct Run {
    refused: BTreeMap<String, String>,
    different: BTreeMap<String, String>,
    passed: usize,
}

fn run_suite() -> Run {
    let dir = Path::new(SUITE);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("JSON-Schema-Test-Suite not found at {SUITE}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() > 40,
        "expected the draft 2020-12 required tests, found {} files",
        files.len()
    );
    let mut run = Run::default();
    // The suite's own documents use integers beyond 2^53 in a few places;
    // widen the decoder's integer limit for reading the suite only.
    let limits = Limits::provider_body()
        .with_max_bytes(4 << 20)
        .with_max_integer(u64::MAX);
    for file in files {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("file name")
            .to_owned();
        let bytes = std::fs::read(&file).expect("read suite file");
        let groups = match decode_strict(&bytes, &limits) {
            Ok(Value::Array(groups)) => groups,
            Ok(_) => panic!("{name}: not an array of groups"),
            Err(r) => panic!("{name}: the strict decoder rejects the suite file: {r}"),
        };
        for group in groups {
            let description = group["description"].as_str().expect("group description");
            let id = format!("{name}: {description}");
            let schema = match Schema::compile(&group["schema"]) {
                Ok(s) => s,
                Err(e) => {
                    run.refused.insert(id, e.keyword);
                    continue;
                }
            };
            for test in group["tests"].as_array().expect("tests") {
                let expected = test["valid"].as_bool().expect("valid flag");
                let test_id = format!(
                    "{id} / {}",
                    test["description"].as_str().expect("test description")
                );
                let got = schema.is_valid(&test["data"]);
                // validate() must agree with is_valid() on every case, and
                // so must the full violation search validate() falls back
                // on (it asks is_valid() first).
                assert_eq!(schema.validate(&test["data"]).is_ok(), got, "{test_id}");
                assert_eq!(
                    schema.first_violation(&test["data"]).is_none(),
                    got,
                    "{test_id}"
                );
                if got == expected {
                    run.passed += 1;
                } else {
                    run.different
                        .insert(test_id, format!("expected valid={expected}"));
                }
            }
        }
    }
    run
}

#[test]
fn draft2020_12_required_tests_pass_except_the_listed_differences() {
    let run = run_suite();
    if std::env::var_os("TOOLGATE_PRINT_SUITE").is_some() {
        for (id, kw) in &run.refused {
            println!("REFUSED ({id:?}, {kw:?}),");
        }
        for (id, why) in &run.different {
            println!("DIFFERENT ({id:?}, {why:?}),");
        }
    }
    let listed_refused: BTreeMap<String, String> = REFUSED
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(run.refused, listed_refused, "groups refused by the audit");
    let got: Vec<&String> = run.different.keys().collect();
    let listed: Vec<String> = DIFFERENT.iter().map(|(id, _)| (*id).to_owned()).collect();
    let listed: Vec<&String> = listed.iter().collect();
    assert_eq!(got, listed, "tests where toolgate differs");
    assert!(run.passed > 1000, "only {} tests agreed", run.passed);
}
