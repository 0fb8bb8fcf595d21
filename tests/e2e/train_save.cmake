# `rewind train --save FILE.safetensors --mode both` writes one file per mode, for the MLP and for
# the CNN; their headers are read here with CMake's own JSON parser, as an outsider reads them:
# the tensor names, shapes and dtype that PyTorch expects (torch.nn.Linear's, Conv2d's and
# GroupNorm's), the metadata, and byte ranges that cover the data to its end.
#   -DPROG=rewind -DOUT=folder
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
# check_file(FILE NAME:KEY...=VALUE...): the header's entries, the metadata and the byte ranges
function(check_file f)
  set(expect ${ARGN})
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "no ${f}")
  endif()
  file(READ "${f}" length HEX LIMIT 8)  # little-endian
  set(big "")
  foreach(i RANGE 14 0 -2)
    string(SUBSTRING "${length}" ${i} 2 byte)
    string(APPEND big "${byte}")
  endforeach()
  math(EXPR n "0x${big}")
  file(READ "${f}" header OFFSET 8 LIMIT ${n})
  file(SIZE "${f}" size)
  math(EXPR data "${size} - 8 - ${n}")
  foreach(e IN LISTS expect)
    string(REPLACE "=" ";" kv "${e}")
    list(GET kv 0 path)
    list(GET kv 1 want)
    string(REPLACE ":" ";" keys "${path}")
    string(JSON got ERROR_VARIABLE jerr GET "${header}" ${keys})
    if(jerr OR NOT got STREQUAL want)
      message(FATAL_ERROR "${f}: ${path} is '${got}' (${jerr}), expected '${want}'\n${header}")
    endif()
  endforeach()
  string(JSON block ERROR_VARIABLE jerr GET "${header}" __metadata__ rewind.block)
  string(JSON sum ERROR_VARIABLE jerr2 GET "${header}" __metadata__ rewind.checksum)
  if(jerr OR jerr2)
    message(FATAL_ERROR "${f}: no rewind metadata\n${header}")
  endif()
  # the byte ranges cover the data: the largest end is the data's size
  string(JSON count LENGTH "${header}")
  set(top 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON name MEMBER "${header}" ${i})
    if(NOT name STREQUAL "__metadata__")
      string(JSON end GET "${header}" "${name}" data_offsets 1)
      if(end GREATER top)
        set(top ${end})
      endif()
    endif()
  endforeach()
  if(NOT top EQUAL data)
    message(FATAL_ERROR "${f}: the tensors end at byte ${top} of ${data} data bytes")
  endif()
  math(EXPR tensors "${count} - 1")
  message(STATUS "${f}: ${tensors} tensors, ${data} data bytes")
endfunction()

execute_process(COMMAND ${PROG} train --synthetic --depth 2 --batch 32 --epochs 1 --train-limit 64 --test-limit 32
                        --save ${OUT}/w.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train --save failed (${rc}):\n${out}\n${err}")
endif()
foreach(mode stored reversible)
  check_file("${OUT}/w.${mode}.safetensors" "head.weight:shape:0=10" "head.weight:shape:1=784" "head.bias:shape:0=10"
             "layer0.f.0.weight:shape:0=16" "layer0.f.0.weight:shape:1=784" "layer1.f.2.weight:shape:0=784" "layer1.f.2.bias:shape:0=784"
             "layer1.f.2.weight:dtype=F32" "__metadata__:format=pt")
endforeach()

execute_process(COMMAND ${PROG} train --net cnn --synthetic --depth 2 --batch 32 --epochs 1 --train-limit 64 --test-limit 32
                        --mode reversible --save ${OUT}/c.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train --net cnn --save failed (${rc}):\n${out}\n${err}")
endif()
check_file("${OUT}/c.safetensors" "layer0.f.0.weight:shape:0=32" "layer0.f.0.weight:shape:1=16" "layer0.f.0.weight:shape:2=3"
           "layer0.f.0.weight:shape:3=3" "layer0.f.0.bias:shape:0=32" "layer0.f.1.weight:shape:0=32" "layer0.f.1.bias:shape:0=32"
           "layer1.f.3.weight:shape:0=16" "layer1.f.3.weight:shape:1=32" "layer1.f.3.bias:shape:0=16" "head.weight:shape:1=784")
