build/src/quant.o: src/quant.c include/demo.h
include/demo.h:
