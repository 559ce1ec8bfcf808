build/src/backend-cpu/ops-softmax.o: src/backend-cpu/ops-softmax.c \
 src/backend-cpu/cpu-ops.h include/demo.h
src/backend-cpu/cpu-ops.h:
include/demo.h:
