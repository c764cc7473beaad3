// A loss, optimizer or schedule outside its choices is refused by tec-opt's option parser, naming the option.
// RUN: not tec-opt %s --tec-build-train-step="loss=huber" 2>&1 | FileCheck %s --check-prefix=LOSS
// RUN: not tec-opt %s --tec-build-train-step="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// RUN: not tec-opt %s --tec-build-train-step="schedule=linear" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// LOSS: for the --loss option: Cannot find option named 'huber'!
// OPTIMIZER: for the --optimizer option: Cannot find option named 'lion'!
// SCHEDULE: for the --schedule option: Cannot find option named 'linear'!
module {
}
