build/src/backend-accel/accel-backend.o: \
 src/backend-accel/accel-backend.c include/demo.h
include/demo.h:
