// Bad options are errors with the option's name, not crashes.
// RUN: not tec-opt %s --tec-insert-fp8="fp8=maybe" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not tec-opt %s --tec-insert-fp8="keep-precision=(" 2>&1 | FileCheck %s --check-prefix=REGEX
// MODE: for the --fp8 option: Cannot find option named 'maybe'!
// REGEX: error: --keep-precision is not a valid regex: '('
module {
}
