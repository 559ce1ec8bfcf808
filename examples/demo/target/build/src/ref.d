build/src/ref.o: src/ref.c include/demo.h
include/demo.h:
