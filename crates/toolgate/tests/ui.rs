//! Compile-fail tests: the pipeline's order is in the types, so skipping a
//! stage does not compile. Each case's `.stderr` pins the error (E0451:
//! private field, E0624: private constructor).

#[test]
fn skipping_a_stage_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
