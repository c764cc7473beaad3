// Bad options are errors with the option's name, not crashes.
// RUN: not tec-opt %s --tec-insert-fp8="fp8=maybe" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not tec-opt %s --tec-insert-fp8="keep-precision=(" 2>&1 | FileCheck %s --check-prefix=REGEX
// RUN: not tec-opt %s --tec-insert-fp8="recipe=fast" 2>&1 | FileCheck %s --check-prefix=RECIPE
// RUN: not tec-opt %s --tec-insert-fp8="recipe=block;fc1" 2>&1 | FileCheck %s --check-prefix=LAYER
// RUN: not tec-opt %s --tec-insert-fp8="recipe=block block-scales=f16" 2>&1 | FileCheck %s --check-prefix=SCALES
// RUN: not tec-opt %s --tec-insert-fp8="target=sm_42" 2>&1 | FileCheck %s --check-prefix=TARGET
// MODE: for the --fp8 option: Cannot find option named 'maybe'!
// RECIPE: error: --fp8-recipe: expected RECIPE[;REGEX=RECIPE...] with recipes auto, delayed, current, block or mxfp8, got 'fast'
// LAYER: error: --fp8-recipe: expected RECIPE[;REGEX=RECIPE...] with recipes auto, delayed, current, block or mxfp8, got 'fc1'
// SCALES: error: --fp8-block-scales: expected pow2 or f32, got 'f16'
// TARGET: error: unknown target 'sm_42' 
// REGEX: error: --keep-precision is not a valid regex: '('
module {
}
