# libhdf5 (Debian's libhdf5-dev, the serial build) for Keras weight files. Found directly rather
# than through FindHDF5, which needs the C language enabled here and in every consumer project.
find_path(LOCKSTEP_HDF5_INCLUDE NAMES hdf5.h PATH_SUFFIXES hdf5/serial)
find_library(LOCKSTEP_HDF5_LIB NAMES hdf5_serial hdf5 PATH_SUFFIXES hdf5/serial)
if(NOT LOCKSTEP_HDF5_INCLUDE OR NOT LOCKSTEP_HDF5_LIB)
  message(FATAL_ERROR "libhdf5 not found: run scripts/setup.sh (apt package libhdf5-dev)")
endif()
add_library(lockstep_hdf5 INTERFACE)
target_link_libraries(lockstep_hdf5 INTERFACE ${LOCKSTEP_HDF5_LIB})
target_include_directories(lockstep_hdf5 SYSTEM INTERFACE $<BUILD_INTERFACE:${LOCKSTEP_HDF5_INCLUDE}>)
set(LOCKSTEP_HDF5_TARGET lockstep_hdf5)
