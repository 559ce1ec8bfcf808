build/src/backend-cpu/ops-matvec.o: src/backend-cpu/ops-matvec.c \
 src/backend-cpu/cpu-ops.h include/demo.h
src/backend-cpu/cpu-ops.h:
include/demo.h:
